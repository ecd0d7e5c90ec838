"""TF op → tfjit IR lowerings.  Importing this package registers every rule."""
from tfjit.lower import conv, elementwise, indexing, linalg, reduce, shape, variables  # noqa: F401
from tfjit.lower import batch_norm, movement_grad, nn, nn_grad, pooling  # noqa: F401

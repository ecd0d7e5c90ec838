"""TF op → tfjit IR lowerings.  Importing this package registers every rule."""
from tfjit.lower import (conv, control_flow, elementwise, indexing, linalg, reduce,  # noqa: F401
                         shape, split, tensor_list, variables)
from tfjit.lower import batch_norm, movement_grad, nn, nn_grad, pooling  # noqa: F401

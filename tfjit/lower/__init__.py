"""TF op → tfjit IR lowerings.  Importing this package registers every rule."""
from tfjit.lower import conv, elementwise, indexing, linalg, reduce, shape, variables  # noqa: F401

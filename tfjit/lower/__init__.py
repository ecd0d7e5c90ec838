"""TF op → tfjit IR lowerings.  Importing this package registers every rule."""
from tfjit.lower import (conv, control_flow, elementwise, linalg, reduce, shape,  # noqa: F401
                         split, tensor_list, variables)

"""TF op → tfjit IR lowerings.  Importing this package registers every rule."""
from tfjit.lower import (bitwise, conv, conv3d, control_flow, elementwise, indexing, linalg,  # noqa: F401
                         random, reduce, shape, split, tensor_list, variables)
from tfjit.lower import batch_norm, color, image, indexing_nd, movement_grad, nn, nn_grad, pooling  # noqa: F401
from tfjit.lower import decompositions, diag, lookup, lrn, quantize, shuffle, space_batch  # noqa: F401
from tfjit.lower import grappler_fused, special, where  # noqa: F401
from tfjit.lower import complex  # noqa: F401,E402  (after the real rules it splits)
from tfjit.lower import fft  # noqa: F401,E402

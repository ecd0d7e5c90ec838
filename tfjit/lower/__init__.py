"""TF op → tfjit IR lowerings.  Importing this package registers every rule."""
from tfjit.lower import bitwise, elementwise, random, reduce, shape  # noqa: F401

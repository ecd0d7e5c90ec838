"""TF op → tfjit IR lowerings.  Importing this package registers every rule."""
from tfjit.lower import elementwise, reduce, shape, variables  # noqa: F401

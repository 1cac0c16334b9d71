"""Pattern 5, reference passthrough: import the problem module the worker loaded
(`stratagem_reference`) and inherit its Model, so the reference does all the work."""

import stratagem_reference


class ModelNew(stratagem_reference.Model):
    pass

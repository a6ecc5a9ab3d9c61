"""stub"""

NAME = "faults"


def check(config):
    raise NotImplementedError

"""stub"""

NAME = "stream-order"


def check(config):
    raise NotImplementedError

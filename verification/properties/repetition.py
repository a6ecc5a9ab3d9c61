"""stub"""

NAME = "repetition"


def check(config):
    raise NotImplementedError

"""Shared test set-up."""
import logging

import paddle
import pytest


@pytest.fixture(autouse=True)
def fresh_library_logger():
    """Tools run in-process (tests call their `main`) configure the "paddle_vit" logger for a
    terminal; give every test the library's default logger back, so caplog sees its records."""
    yield
    logger = logging.getLogger("paddle_vit")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


@pytest.fixture
def paddle_flops_with_numpy2(monkeypatch):
    """paddle.flops (Paddle 3.3) converts its 1-element 1-D counters with int(), which numpy 2.4
    refuses ("only 0-dimensional arrays can be converted"); let int() read such a tensor."""
    original = paddle.Tensor.__int__

    def to_int(tensor):
        return original(tensor.reshape([])) if tensor.ndim == 1 and tensor.shape[0] == 1 else original(tensor)

    monkeypatch.setattr(paddle.Tensor, "__int__", to_int)

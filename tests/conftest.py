"""Shared test set-up."""
import logging

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

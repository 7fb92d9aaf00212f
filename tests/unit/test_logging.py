from __future__ import annotations

import logging

import pytest

from propulate.progress import format_duration
from propulate.utils import set_logger_config


def test_set_logger_config_is_idempotent(tmp_path, capsys):
    log_file = tmp_path / "nested" / "run.log"
    set_logger_config(level=logging.INFO, log_file=log_file, log_to_stdout=True, colors=False)
    set_logger_config(level=logging.INFO, log_file=log_file, log_to_stdout=True, colors=False)
    logger = logging.getLogger("propulate")
    ours = [h for h in logger.handlers if type(h) in (logging.StreamHandler, logging.FileHandler)]
    assert len(ours) == 2  # one stream, one file: not doubled by the second call
    logger.info("hello once")
    for handler in logger.handlers:
        handler.flush()
    assert capsys.readouterr().out.count("hello once") == 1
    assert log_file.read_text().count("hello once") == 1


def test_rank_prefix_and_level(tmp_path, capsys):
    set_logger_config(level=logging.WARNING, log_file=None, log_rank=True, colors=False)
    logger = logging.getLogger("propulate")
    logger.info("hidden")
    logger.warning("shown")
    out = capsys.readouterr().out
    assert "hidden" not in out
    assert "[rank 0] " in out and "shown" in out
    set_logger_config(log_to_stdout=False)
    handlers = logging.getLogger("propulate").handlers
    assert not [h for h in handlers if type(h) in (logging.StreamHandler, logging.FileHandler)]


def test_per_rank_log_file_and_first_rank_stdout(tmp_path, capsys):
    set_logger_config(log_file=tmp_path / "logs" / "rank-{rank}.log", log_to_stdout="first", colors=False)
    logging.getLogger("propulate").info("hello")
    assert "hello" in (tmp_path / "logs" / "rank-0.log").read_text()
    assert "hello" in capsys.readouterr().out  # a single process is the first rank
    set_logger_config(log_to_stdout=False)


def test_log_to_stdout_is_checked():
    with pytest.raises(ValueError, match="log_to_stdout"):
        set_logger_config(log_to_stdout="all")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.04, "0.0 s"),
        (4.25, "4.2 s"),
        (42, "42 s"),
        (185, "3 min 5 s"),
        (7800, "2 h 10 min"),
        (273600, "3 d 4 h"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text

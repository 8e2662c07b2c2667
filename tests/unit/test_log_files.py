"""Log file followers (torchx_airflow/log_files.py): to the end of a file, each line once, streams kept
apart, and stopping when the app ends."""

from __future__ import annotations


def test_a_follower_reads_to_the_end_and_asks_the_scheduler_only_after_the_app_ended(tmp_path):
    import threading

    from torchx_airflow.log_files import follow_file

    log = tmp_path / "slurm-1-r-0.out"
    asked: list[bool] = []

    def locate(ask: bool) -> str | None:
        asked.append(ask)
        return str(log) if log.exists() else None

    ended = threading.Event()
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(follow_file(locate, ended.is_set, ended.wait, poll=0.05))
    )
    reader.start()
    log.write_text("one\ntw")
    with log.open("a") as f:
        f.write("o\nthree")  # no newline yet: written before the app ended
    ended.set()
    reader.join(10)
    assert not reader.is_alive()
    assert lines == ["one", "two", "three"]
    assert True not in asked[:-1]  # while the app ran, the file was looked for without asking


def test_a_follower_whose_file_never_appears_stops_when_the_app_ends(tmp_path):
    import threading

    from torchx_airflow.log_files import follow_file

    ended = threading.Event()
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(follow_file(lambda ask: None, ended.is_set, ended.wait))
    )
    reader.start()
    ended.set()
    reader.join(10)
    assert not reader.is_alive() and lines == []


def test_log_file_follower_shows_each_line_once_and_keeps_streams_apart(tmp_path):
    from torchx_airflow.log_files import LogFileFollower

    out, err = tmp_path / "out", tmp_path / "err"
    files = {"stdout": out, "stderr": err}
    follower = LogFileFollower([("trainer", 0, "stdout"), ("trainer", 0, "stderr")])

    def locate(role, k, stream):
        return str(files[stream])

    assert follower.read_new(locate) == []  # no file yet
    out.write_text("epoch 1\nepo")
    err.write_text("warning\n")
    assert follower.read_new(locate) == [("[trainer/0]", "epoch 1"), ("[trainer/0]", "warning")]
    with out.open("a") as f:
        f.write("ch 2\nlast")
    assert follower.read_new(locate) == [("[trainer/0]", "epoch 2")]  # "last" is unfinished
    assert follower.read_new(locate, final=True) == [("[trainer/0]", "last")]
    assert follower.cursor == {"trainer/0/stdout": 3, "trainer/0/stderr": 1}
    # a trigger re-created with that cursor shows nothing again
    again = LogFileFollower(follower.streams, follower.cursor)
    assert again.read_new(locate, final=True) == []
    assert again.cursor == follower.cursor

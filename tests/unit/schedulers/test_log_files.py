"""Log file followers (schedulers/log_files.py): to the end of a file, each line once, streams kept
apart, and stopping when the app ends."""

from __future__ import annotations


def test_a_follower_reads_to_the_end_and_asks_the_scheduler_only_after_the_app_ended(tmp_path):
    import threading

    from torchx_airflow.schedulers.log_files import follow_file

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

    from torchx_airflow.schedulers.log_files import follow_file

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
    from torchx_airflow.schedulers.log_files import LogFileFollower

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


def test_log_file_follower_resumes_from_its_byte_offsets_not_from_byte_0(tmp_path):
    from torchx_airflow.schedulers.log_files import LogFileFollower

    log = tmp_path / "out"
    log.write_text("".join(f"line {i}\n" for i in range(1000)) + "unfin")
    streams = [("trainer", 0, "stdout")]
    first = LogFileFollower(streams)
    assert len(first.read_new(lambda *_: str(log))) == 1000
    # a triggerer restart: the trigger comes back with its cursor and offsets, the file was rotated
    # away under the old lines (only the offsets can tell where to go on)
    offset = first.offsets["trainer/0/stdout"]
    assert offset == log.stat().st_size - len("unfin")
    log.write_bytes(b"x" * offset + b"unfinished\nnew\n")
    again = LogFileFollower(streams, first.cursor, first.offsets)
    assert again.read_new(lambda *_: str(log)) == [("[trainer/0]", "unfinished"), ("[trainer/0]", "new")]
    assert again.cursor == {"trainer/0/stdout": 1002}


def test_log_file_follower_reads_in_bounded_chunks_and_caps_a_progress_line(tmp_path, monkeypatch):
    from torchx_airflow.schedulers import log_files

    monkeypatch.setattr(log_files, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(log_files, "MAX_BYTES_PER_LOOK", 4096)
    log = tmp_path / "out"
    # a progress bar that never ends its line: 100 KB of \r-separated states
    log.write_bytes(b"start\n" + b"".join(b"%05d%%\r" % i for i in range(14000)))
    follower = log_files.LogFileFollower([("t", 0, "stdout")])
    reads = []
    real_open = open

    class CountingFile:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def seek(self, n):
            self.f.seek(n)

        def read(self, n):
            reads.append(n)
            return self.f.read(n)

    monkeypatch.setattr(log_files, "open", lambda p, mode: CountingFile(real_open(p, mode)), raising=False)
    shown = []
    for _ in range(40):
        shown += follower.read_new(lambda *_: str(log))
        assert len(follower._partial.get("t/0/stdout", b"")) <= log_files.MAX_PARTIAL_LINE
    assert shown == [("[t/0]", "start")]
    assert max(reads) == 1024 and len(reads) <= 40 * 4
    with log.open("ab") as f:
        f.write(b"done\n")
    for _ in range(40):
        shown += follower.read_new(lambda *_: str(log))
    assert shown[-1][1].endswith("13999%\rdone") and len(shown) == 2
    assert follower.offsets["t/0/stdout"] == log.stat().st_size

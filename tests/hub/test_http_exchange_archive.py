"""The exchange service's tar streams and store: every hostile member refused before anything is written.

Each stream is made here as an attacker would make it (tarfile, members by hand): a link to a file of the
service's account, a hard link, a FIFO, a device, an absolute path, a `..`, a header that claims a huge file,
too many files, too deep a path, one name twice, a compressed bomb, a stream cut short.
"""

import gzip
import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from autograder.hub.exchange.http.archive import ArchiveRefused, check_name, pack, unpack, upload_cap
from autograder.hub.exchange.http.store import RELEASED, SUBMITTED, FolderStore, check_part
from autograder.safe_copy import Limits

SMALL = Limits(file_bytes=1000, total_bytes=3000, entries=10, depth=3)


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", size: int | None = None,
           link: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if size is None else size
    return info, data


def stream(*members: tuple[tarfile.TarInfo, bytes]) -> io.BytesIO:
    """Return a tar stream of these members, written header by header (sizes as claimed, not as held)."""
    out = io.BytesIO()
    for info, data in members:
        out.write(info.tobuf(tarfile.PAX_FORMAT))
        if info.isreg():
            out.write(data + b"\0" * (-len(data) % 512))
    out.write(b"\0" * 1024)
    out.seek(0)
    return out


def refused(tmp_path: Path, *members, limits: Limits = SMALL) -> str:
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(ArchiveRefused) as caught:
        unpack(stream(*members) if members and isinstance(members[0], tuple) else members[0], dest, limits)
    return str(caught.value)


def written(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))


def test_a_plain_folder_round_trips(tmp_path: Path) -> None:
    (tmp_path / "src" / "data").mkdir(parents=True)
    (tmp_path / "src" / "ps01.ipynb").write_text("{}")
    (tmp_path / "src" / "data" / "x.csv").write_text("1,2")
    (tmp_path / "src" / ".ipynb_checkpoints").mkdir()
    (tmp_path / "src" / ".ipynb_checkpoints" / "old.ipynb").write_text("{}")
    body = pack(tmp_path / "src", lambda rel: rel.split("/")[0] == ".ipynb_checkpoints")
    (tmp_path / "dest").mkdir()
    done = unpack(io.BytesIO(body), tmp_path / "dest", SMALL)
    assert done.files == ("data/x.csv", "ps01.ipynb") and done.total_bytes == 5
    assert (tmp_path / "dest" / "data" / "x.csv").read_text() == "1,2"


@pytest.mark.parametrize(("kind", "why"), [(tarfile.SYMTYPE, "symbolic link"), (tarfile.LNKTYPE, "hard link"),
                                           (tarfile.FIFOTYPE, "FIFO"), (tarfile.CHRTYPE, "device"),
                                           (tarfile.BLKTYPE, "device")])
def test_links_fifos_and_devices_are_refused(tmp_path: Path, kind: bytes, why: str) -> None:
    said = refused(tmp_path, member("ok.txt", data=b"fine"), member("ps01.ipynb", kind, link="/etc/shadow"))
    assert why in said and "ps01.ipynb" in said
    assert written(tmp_path) == ["dest", "dest/ok.txt"]  # what came before stays in the scratch folder only


@pytest.mark.parametrize("name", ["/etc/cron.d/x", "../outside.txt", "a/../../outside.txt", "..", "a\\..\\b",
                                  "bad\x1b[2Jname", ""])
def test_paths_that_leave_the_folder_are_refused(tmp_path: Path, name: str) -> None:
    refused(tmp_path, member(name, data=b"x"))
    assert written(tmp_path) == ["dest"]


def test_a_header_claiming_a_huge_file_is_refused_before_reading(tmp_path: Path) -> None:
    said = refused(tmp_path, member("big.bin", size=50 << 30))  # no data follows: it is never read
    assert "big.bin" in said and "over 1000" in said
    assert written(tmp_path) == ["dest"]


def test_files_past_the_total_are_refused(tmp_path: Path) -> None:
    said = refused(tmp_path, *(member(f"f{i}", data=b"x" * 900) for i in range(4)))
    assert "f3" in said and "in all" in said


def test_too_many_entries_are_refused(tmp_path: Path) -> None:
    assert "more than 10 entries" in refused(tmp_path, *(member(f"f{i}", data=b"") for i in range(11)))


def test_too_deep_a_path_is_refused(tmp_path: Path) -> None:
    assert "deeper than 3" in refused(tmp_path, member("a/b/c/d.txt", data=b"x"))


def test_a_name_twice_and_a_file_over_a_folder_are_refused(tmp_path: Path) -> None:
    assert "twice" in refused(tmp_path, member("a.txt", data=b"1"), member("a.txt", data=b"2"))
    (tmp_path / "again").mkdir()
    assert "same name" in refused(tmp_path / "again", member("a", data=b"1"), member("a/b", data=b"2"))


def test_compressed_zip_and_truncated_streams_are_refused(tmp_path: Path) -> None:
    bomb = io.BytesIO(gzip.compress(stream(member("zeros", data=b"\0" * 100_000)).getvalue()))
    refused(tmp_path, bomb)
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as archive:
        archive.writestr("ps01.ipynb", "{}")
    packed.seek(0)
    (tmp_path / "zip").mkdir()
    refused(tmp_path / "zip", packed)
    cut = io.BytesIO(stream(member("a.txt", data=b"x" * 800)).getvalue()[:700])
    (tmp_path / "cut").mkdir()
    refused(tmp_path / "cut", cut)


def test_the_upload_cap_fits_a_folder_at_the_limits(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(10):
        (src / f"{'n' * 90}{i}").write_bytes(b"x" * 300)
    assert len(pack(src, limits=SMALL)) <= upload_cap(SMALL)
    (src / "one-too-many").write_bytes(b"")
    with pytest.raises(ArchiveRefused):
        pack(src, limits=SMALL)


def test_pack_leaves_out_links_and_special_files(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "ps01.ipynb").write_text("{}")
    (src / "secret").symlink_to("/etc/passwd")
    (src / "dir-link").symlink_to("/etc")
    os.mkfifo(src / "fifo")
    (tmp_path / "dest").mkdir()
    assert unpack(io.BytesIO(pack(src)), tmp_path / "dest", SMALL).files == ("ps01.ipynb",)


def test_check_name_keeps_plain_names() -> None:
    assert check_name("./feedback/2026-01-01 10:00:00.000001 UTC/ps01.html", 3) == (
        "feedback", "2026-01-01 10:00:00.000001 UTC", "ps01.html")


@pytest.mark.parametrize("part", ["", ".", "..", ".hidden", "a/b", "a\\b", "x\n", "x" * 256])
def test_store_keys_are_plain_names(part: str) -> None:
    with pytest.raises(ArchiveRefused):
        check_part(part)


def test_the_store_puts_whole_trees_or_nothing(tmp_path: Path) -> None:
    store = FolderStore(tmp_path / "store")
    assert (tmp_path / "store").stat().st_mode & 0o777 == 0o700
    store.put((RELEASED, "ps01"), stream(member("ps01.ipynb", data=b"{}")), SMALL)
    with pytest.raises(FileExistsError):
        store.put((RELEASED, "ps01"), stream(member("ps01.ipynb", data=b"{ }")), SMALL)
    store.put((RELEASED, "ps01"), stream(member("ps01.ipynb", data=b"{ }")), SMALL, replace=True)
    with tarfile.open(fileobj=io.BytesIO(store.get((RELEASED, "ps01")))) as archive:
        assert archive.getnames() == ["ps01.ipynb"]
    with pytest.raises(ArchiveRefused):
        store.put((SUBMITTED, "ps01", "ann", "t1"), stream(member("a", data=b"1"), member("../b", data=b"2")),
                  SMALL)
    assert store.children((SUBMITTED, "ps01")) == [] and not any(tmp_path.glob("store/.put-*"))
    assert store.children((RELEASED,)) == ["ps01"] and list(store.files((RELEASED, "ps01"))) == ["ps01.ipynb"]
    with pytest.raises(KeyError):
        store.get((RELEASED, "ps02"))


def test_the_store_removes_a_whole_tree_and_a_missing_one_is_nothing(tmp_path: Path) -> None:
    store = FolderStore(tmp_path / "store")
    for stamp in ("t1", "t2"):
        store.put((SUBMITTED, "ps01", "ann", stamp), stream(member("sub/a", data=b"1")), SMALL)
    store.remove((SUBMITTED, "ps01", "ann", "t1"))
    assert store.children((SUBMITTED, "ps01", "ann")) == ["t2"] and not any(tmp_path.glob("store/.*"))
    store.remove((SUBMITTED, "ps01", "ann", "t1"))
    store.remove((SUBMITTED, "ps02", "bob", "t1"))
    assert list(store.files((SUBMITTED, "ps01", "ann", "t2"))) == ["sub/a"]
    with pytest.raises(ArchiveRefused):
        store.remove((SUBMITTED, "..", "ann"))


@pytest.mark.parametrize("inside", [False, True])
@pytest.mark.parametrize("planted", [(SUBMITTED, "ps01", "ann", "t1"), (SUBMITTED, "ps01")])
def test_the_store_never_removes_through_a_link_planted_in_it(tmp_path: Path, planted: tuple,
                                                               inside: bool) -> None:
    """A link where the key's folder, or one above it, should be: what it points to (outside the store, or
    another key's tree in it) is no tree of that key's, and stays."""
    store = FolderStore(tmp_path / "store")
    target = store.root / RELEASED / "ps02" if inside else tmp_path / "outside"
    (target / "ann" / "t1").mkdir(parents=True)
    (target / "ann" / "t1" / "keep").write_text("mine")
    link = store.root.joinpath(*planted)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target / "ann" / "t1" if len(planted) == 4 else target, target_is_directory=True)
    store.remove((SUBMITTED, "ps01", "ann", "t1"))
    assert (target / "ann" / "t1" / "keep").read_text() == "mine" and link.is_symlink()

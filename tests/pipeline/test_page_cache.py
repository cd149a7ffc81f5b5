"""Reading torch's files into the page cache: which files, and that every byte of them is read."""

from pathlib import Path

from pipeline import page_cache


def test_prefetch_reads_every_byte_of_every_file_and_skips_what_cannot_be_read(tmp_path):
    sizes = {"a.so": 3 * page_cache.CHUNK + 17, "b.pyc": 5, "empty": 0}
    for name, n in sizes.items():
        (tmp_path / name).write_bytes(b"x" * n)
    paths = [tmp_path / name for name in sizes] + [tmp_path / "gone.so"]
    assert page_cache.prefetch(paths, threads=3) == sum(sizes.values())
    assert page_cache.prefetch([]) == 0


def test_torch_files_are_torchs_libraries_largest_first_then_its_compiled_modules():
    import torch

    torch_dir = Path(torch.__file__).resolve().parent
    files = page_cache.torch_files()
    libs = [p for p in files if ".so" in p.name]
    pycs = [p for p in files if p.suffix == ".pyc"]
    assert libs and pycs and files == libs + pycs
    assert any(p.name.startswith("libtorch_cpu") for p in libs)  # what torch's extension module links
    assert [p.stat().st_size for p in libs] == sorted((p.stat().st_size for p in libs), reverse=True)
    assert all(p.resolve().is_relative_to(torch_dir) for p in pycs)
    assert all(not str(p).startswith(("/lib", "/usr/lib")) for p in libs)  # the system's are left alone


def test_opsynth_prefetch_0_turns_it_off(monkeypatch):
    monkeypatch.setenv("OPSYNTH_PREFETCH", "0")
    assert page_cache.page_cache_disabled()
    monkeypatch.setenv("OPSYNTH_PREFETCH", "1")
    assert not page_cache.page_cache_disabled()

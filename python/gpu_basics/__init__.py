"""gpu-basics from Python: its caching CUDA allocator as PyTorch's allocator.

    import gpu_basics.torch as gbt
    gbt.use(conf="expandable_segments:True")   # before CUDA is initialised
    ...
    print(gbt.memory_summary())

`gpu_basics.torch` mirrors PyTorch's memory API (memory_stats, max_memory_reserved,
memory_snapshot, ...). This module needs no PyTorch: it reads what the allocator library was
built for and checks allocator conf strings.
"""
from ._native import (GpuBasicsError, Library, LibraryMismatch, LibraryNotFound,  # noqa: F401
                      find_library)


def _version() -> str:
    """The repository's VERSION: written into an installed package as _version.py, read from
    the source tree where the package is imported from there."""
    try:
        from ._version import version
        return version
    except ImportError:
        import os
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "VERSION")
        with open(path, encoding="utf-8") as f:
            return f.read().strip()


__version__ = _version()
__all__ = ["GpuBasicsError", "Library", "LibraryMismatch", "LibraryNotFound", "build_info",
           "check_conf", "find_library", "__version__"]


def check_conf(conf: str, library: str = None) -> str:
    """The conf string (PYTORCH_CUDA_ALLOC_CONF's syntax, plus page_release) normalised; raises
    ValueError naming the bad part (control characters escaped), TypeError if conf is not a
    str."""
    from ._native import conf_bytes
    conf_bytes(conf)  # a wrong type or a NUL is said before any library is looked for
    return Library(library).check_conf(conf)


def build_info(library: str = None) -> dict:
    """What the allocator library was built for: its path and file name (library), torch version
    (None without PyTorch's headers) and torch_dir, the exception out of memory raises, and in an
    installed package what the install did about the c10 library (install)."""
    from ._native import describe
    return describe(Library(library))

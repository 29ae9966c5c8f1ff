"""Versions from the libraries a process has actually loaded (real backend).

In a probe pod the container toolkit injects only the driver's user-space
libraries (``libcuda.so.1``, ``libnvidia-ml.so.1``); ``libcudart`` and
``libnccl`` come from the probe image's own wheels. ``torch.version.cuda`` and
``torch.cuda.nccl.version()`` are compile-time constants of the torch build.
So the image's versions are asked of the library files mapped into this
process (``/proc/self/maps``), by their own API, and reported with the file
name; the node's CUDA version is asked of the driver (``cuDriverGetVersion``).
"""

import ctypes
from collections.abc import Callable
from pathlib import Path

CUDA_DRIVER_LIBRARY = "libcuda.so.1"
CUDA_RUNTIME_PREFIX = "libcudart.so"
NCCL_PREFIX = "libnccl.so"


def loaded_library(maps_text: str, prefix: str) -> str | None:
    """The path of the first mapped file whose name starts with ``prefix``
    (``/proc/<pid>/maps``: the path is the sixth field)."""
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and Path(parts[5].strip()).name.startswith(prefix):
            return parts[5].strip()
    return None


def cuda_version_text(code: int) -> str:
    """``13020`` (1000 x major + 10 x minor, CUDA's encoding) → ``"13.2"``."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def nccl_version_text(code: int) -> str:
    """ncclGetVersion's code → ``"2.27.7"``: X*10000+Y*100+Z since NCCL 2.9,
    X*1000+Y*100+Z before (nccl.h, NCCL_VERSION)."""
    if code >= 20900:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


LibraryLoader = Callable[[str], ctypes.CDLL]


def query_version(library: str, symbol: str, load: LibraryLoader = ctypes.CDLL) -> int:
    """Call ``int symbol(int *version)`` in ``library`` (cudaRuntimeGetVersion,
    cuDriverGetVersion, ncclGetVersion); raises OSError when it cannot load or
    the call returns an error code."""
    handle = load(library)
    function = getattr(handle, symbol)
    value = ctypes.c_int(0)
    status = function(ctypes.byref(value))
    if status != 0:
        raise OSError(f"{symbol} returned {status}")
    return value.value

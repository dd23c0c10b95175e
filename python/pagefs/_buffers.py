"""Byte views of the caller's buffers: bytes, bytearray, memoryview, array,
numpy arrays and (CPU) torch tensors, without copying them."""


def _torch_bytes(t):
    import torch  # only reached for a torch tensor, so torch is present

    if t.device.type != "cpu":
        raise ValueError("pagefs reads and writes CPU tensors only (got %s)" % t.device)
    if not t.is_contiguous():
        raise ValueError("pagefs needs a contiguous tensor")
    flat = t.detach().reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return memoryview(flat.numpy())


def byte_view(buf, writable=False):
    """A flat memoryview of format 'B' over buf's memory.

    Raises ValueError for a buffer that cannot be viewed in place (a GPU
    or non-contiguous tensor, a read-only buffer where writable is asked).
    """
    if type(buf).__module__.startswith("torch"):
        mv = _torch_bytes(buf)
    else:
        try:
            mv = memoryview(buf)
        except TypeError:
            raise ValueError("pagefs needs a buffer (bytes, bytearray, memoryview, "
                             "numpy array or torch tensor), got %s" % type(buf).__name__)
    if not mv.contiguous:
        raise ValueError("pagefs needs a contiguous buffer")
    if writable and mv.readonly:
        raise ValueError("pagefs cannot read into a read-only buffer")
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv

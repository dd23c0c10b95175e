"""Byte views of the caller's buffers: bytes, bytearray, memoryview, array,
numpy arrays and torch tensors in host memory, without copying them.

A torch tensor is viewed through its data_ptr() and byte count (numel x
element_size), so every dtype works the same way, bfloat16 and the float8
types included (numpy has no such types), on torch 1.x and 2.x alike, with
or without numpy. torch is never imported here: a tensor can only exist
where the caller imported torch already.
"""
import ctypes
import sys


def is_tensor(buf):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(buf, getattr(torch, "Tensor", ()))


def tensor_span(t):
    """(first byte address, byte count) of the memory tensor t's elements
    lie in (its whole extent when t is not contiguous)."""
    es = t.element_size()
    if t.numel() == 0:
        return t.data_ptr(), 0
    lo = hi = 0
    for size, stride in zip(t.shape, t.stride()):
        step = (size - 1) * stride * es
        if step < 0:
            lo += step
        else:
            hi += step
    return t.data_ptr() + lo, hi - lo + es


def _torch_bytes(t):
    device = getattr(t.device, "type", str(t.device))
    if device != "cpu":
        raise ValueError("pagefs reads and writes tensors in host memory only, not on %s: copy "
                         "the tensor to a CPU (pinned) tensor first" % t.device)
    if str(t.layout) != "torch.strided":
        raise ValueError("pagefs needs a dense tensor, not %s" % t.layout)
    if not t.is_contiguous():
        raise ValueError("pagefs needs a contiguous tensor (shape %s, stride %s): write "
                         "t.contiguous(), or read into a contiguous tensor and copy"
                         % (tuple(t.shape), t.stride()))
    for bit in ("is_conj", "is_neg"):  # lazily conjugated or negated views (torch >= 1.10)
        if getattr(t, bit, None) is not None and getattr(t, bit)():
            raise ValueError("pagefs needs a tensor whose bytes are its values, not a lazy %s "
                             "view: call resolve_conj() / resolve_neg() first" % bit[3:])
    try:
        nbytes = t.numel() * t.element_size()
        address = t.data_ptr()
    except RuntimeError as e:  # tensors without storage (meta, fake, functional)
        raise ValueError("pagefs cannot address this tensor's memory: %s" % e) from None
    if nbytes == 0:
        return memoryview(bytearray())
    arr = (ctypes.c_ubyte * nbytes).from_address(address)
    arr._tensor = t  # the view keeps the tensor, so its memory, alive
    return memoryview(arr)


def byte_view(buf, writable=False):
    """A flat memoryview of format 'B' over buf's memory.

    Raises ValueError for a buffer that cannot be viewed in place (a tensor
    not in host memory, a non-contiguous one, a read-only buffer where
    writable is asked).
    """
    if is_tensor(buf):
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

"""The judge's IPC record is a copy the harness owns, never the program's own storage (sharing a
storage swaps its deleter, which breaks programs that manage their outputs' memory: CUDA graph
trees). CPU-side: CUDA is simulated by patching the two calls the export makes."""

from __future__ import annotations

import torch

from stratagem.domains.pytorch.worker import ipc


def test_the_export_shares_a_copy_not_the_output(monkeypatch) -> None:
    shared: list[int] = []

    def fake_share(self):  # the storage _share_cuda_ was called on
        shared.append(self.data_ptr())
        return (0, b"h", self.nbytes(), 0, b"r", 0, b"e", False)

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.UntypedStorage, "_share_cuda_", fake_share, raising=False)
    out = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    view = out[:, 1:3]  # a strided view of a larger storage
    desc, keep = ipc.export((out, view))
    own = {out.untyped_storage().data_ptr()}
    assert len(shared) == 2 and not own & set(shared)  # never the program's storage
    assert all(torch.equal(k, o) for k, o in zip(keep, (out, view), strict=True))  # the copies hold the values
    t = desc["tuple"][1]["tensor"]
    assert t["shape"] == [3, 2] and t["offset"] == keep[1].storage_offset()
    assert t["stride"] == list(keep[1].stride())

"""PyTorch eager (one thread) as a peer: NCHW and channels-last convolutions, the faster counts."""
from __future__ import annotations

from .common import PeerSkipped, Prepared


def _torch():
    import torch

    torch.set_num_threads(1)
    return torch


def _torch_fns(w, a):
    """Candidate torch implementations (the best counts): name -> callable."""
    torch = _torch()
    F = torch.nn.functional
    p = w.p
    t = {k: torch.from_numpy(v) for k, v in a.items()}
    fns = {}
    if w.kind == "mm":
        out = torch.empty(t["A"].shape[0], t["B"].shape[1])
        fns["mm"] = lambda: torch.mm(t["A"], t["B"], out=out)
    elif w.kind == "mlp":
        Ws = [t[f"W{i}"].t().contiguous() for i in range(3)]   # nn.Linear keeps W as [out, in]

        def f():
            y = t["X"]
            for i in range(3):
                y = F.relu(F.linear(y, Ws[i], t[f"b{i}"]))
            return y
        fns["eager"] = f
    elif w.kind in ("conv", "dwconv", "mbv3"):
        x = t["X"].permute(2, 0, 1).unsqueeze(0).contiguous()          # NCHW
        if w.kind == "conv":
            wt = t["W"].permute(3, 2, 0, 1).contiguous()                # [k, c, r, s]
            groups, stride, pad = 1, p["stride"], p["pad"]
        else:
            wd = t["W"] if w.kind == "dwconv" else t["Wd"]
            wt = wd.permute(2, 0, 1).unsqueeze(1).contiguous()          # [c, 1, r, s]
            groups, stride, pad = wt.shape[0], p.get("stride", 1), p.get("pad", 1)
        wp = t["Wp"].t().contiguous()[:, :, None, None] if w.kind == "mbv3" else None
        for layout in ("nchw", "channels_last"):
            xx, ww = x, wt
            wpp = wp
            if layout == "channels_last":
                xx = x.contiguous(memory_format=torch.channels_last)
                ww = wt.contiguous(memory_format=torch.channels_last)
                wpp = wp.contiguous(memory_format=torch.channels_last) if wp is not None else None

            def f(xx=xx, ww=ww, wpp=wpp):
                with torch.no_grad():
                    y = F.conv2d(xx, ww, None, stride, pad, 1, groups)
                    if wpp is not None:
                        y = F.relu(F.conv2d(F.relu(y), wpp))
                    return y
            fns[layout] = f
    else:
        raise PeerSkipped(f"torch has no {w.kind}")
    return fns



def prepare(w, a) -> Prepared:
    return Prepared(_torch_fns(w, a))

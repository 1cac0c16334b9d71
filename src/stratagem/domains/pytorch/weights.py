"""Owns what an exported PyTorch design carries to take trained weights with it: the
`load_reference_state_dict` helper appended to the file (`search/export.py` writes it through
the domain's `export_footer`). It places each of the reference's tensors by the rules the
harness's randomised-parameters trial uses (`params.py`)."""

from __future__ import annotations

LOAD_HELPER = '''

# -- added by stratagem export: load the reference Model's weights into this design ------------

def load_reference_state_dict(model, state_dict):
    """Load `state_dict` (the reference `Model`'s `state_dict()`, e.g. trained weights) into
    `model` (a `ModelNew`), whose keys may differ: each tensor goes to the same key, else the one
    key ending in `.KEY`, else by position when every shape agrees in order, else to the one
    tensor of its shape. Raises KeyError naming a tensor it cannot place."""
    own = model.state_dict()
    targets = {}
    free = [k for k in own if k not in state_dict]
    for key, value in state_dict.items():
        if key in own:
            targets[key] = key
            continue
        ends = [k for k in free if k.endswith("." + key)]
        if len(ends) == 1:
            targets[key] = ends[0]
            free.remove(ends[0])
    rest = [k for k in state_dict if k not in targets]
    if rest:
        shapes = [tuple(state_dict[k].shape) for k in rest]
        if [tuple(own[k].shape) for k in free] == shapes:
            targets.update(zip(rest, free))
        else:
            for key in rest:
                same = [k for k in free if tuple(own[k].shape) == tuple(state_dict[key].shape)]
                if len(same) != 1:
                    raise KeyError(f"cannot place the reference's {key} ({tuple(state_dict[key].shape)}) in this design")
                targets[key] = same[0]
                free.remove(same[0])
    model.load_state_dict({**own, **{targets[k]: v for k, v in state_dict.items()}})
    return targets
'''

EXPORT_NOTE = "load the reference's weights with load_reference_state_dict(model, state_dict) at the end of this file"

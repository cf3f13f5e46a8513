import json

from lockstep._core.json_text import readable_json
from lockstep._core.run_state import AttemptRecord, RunState


def test_the_same_document_as_json_with_indent():
    data = {
        "version": 1,
        "time": {"wall": 1.5, "goodput": 0.25},
        "time_per_rank": [{"rank": 0, "wall": 1.5}, {"rank": 1, "wall": None}],
        "name": 'caf\u00e9 "quoted"\n',
        "empty": {},
    }
    text = readable_json(data).decode()
    assert json.loads(text) == json.loads(json.dumps(data, indent=1))
    assert list(json.loads(text)) == list(data)  # the keys in their order
    assert text.splitlines()[1] == ' "version": 1,'  # one top-level key a line
    assert readable_json({}) == b"{}"


def test_sorted_keys_at_every_level():
    text = readable_json({"b": {"z": 1, "a": 2}, "a": 0}, sort_keys=True).decode()
    assert text == '{\n "a": 0,\n "b": {"a": 2, "z": 1}\n}'


def test_run_state_round_trips():
    state = RunState(status="finished", training_iteration=3)
    state.history.append(AttemptRecord(0, 2, 12.5, 0))
    assert RunState.from_json(state.to_json()) == state


def test_default_for_what_json_cannot_hold():
    class Opaque:
        def __repr__(self):
            return "Opaque()"

    text = readable_json({"a": {"obj": Opaque()}}, default=repr)
    assert json.loads(text) == {"a": {"obj": "Opaque()"}}

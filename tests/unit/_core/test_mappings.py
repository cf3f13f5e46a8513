from lockstep._core.mappings import flatten_dict


def test_flatten_dict_joins_nested_keys():
    assert flatten_dict({"a": 1, "b": {"c": 2, "d": {"e": 3}}}) == {"a": 1, "b/c": 2, "b/d/e": 3}


def test_flatten_dict_takes_a_delimiter():
    assert flatten_dict({"a": {"b": {"c": 1}}}, delimiter=".") == {"a.b.c": 1}

"""Clusters by preset name or TOML file: the artifacts' settings, and one-line errors that name file, field and fix."""

import pytest

from pollux.cluster import Cluster, NodeGroup
from pollux.cluster_spec import GPU_TYPES, PRESETS, load_cluster, parse_cluster, read_cluster_file
from pollux.errors import SpecError

GOOD = """
[[group]]
gpu_type = "rtx"
num_nodes = 3
gpus_per_node = 8

[[group]]
gpu_type = "quad"
num_nodes = 1
gpus_per_node = 4
"""


def test_the_sia_heterogeneous_preset_is_six_t4_nodes_three_rtx_and_two_a100_nodes():
    cluster = load_cluster("sia-heterogeneous")
    assert cluster.num_gpus == 64
    assert {t: cluster.gpus_of_type(t) for t in cluster.gpu_types} == {"aws": 24, "rtx": 24, "dgx-ext": 16}
    assert cluster.node_gpus == (4,) * 6 + (8,) * 5


def test_the_homogeneous_presets_are_the_pollux_artifacts_cluster():
    for name in ("sia-homogeneous", "pollux-artifact"):
        assert load_cluster(name) == Cluster(16, 4, "aws")


def test_the_physical_preset_has_three_types_and_nodes_of_two_sizes():
    cluster = load_cluster("sia-physical")
    assert cluster.gpu_types == ("rtx", "dgx-ext", "quad")
    assert not cluster.uniform and cluster.num_gpus == 44


def test_every_preset_uses_only_known_gpu_types_and_every_type_names_its_hardware():
    for cluster in PRESETS.values():
        assert set(cluster.gpu_types) <= set(GPU_TYPES)
    assert all(t.hardware for t in GPU_TYPES.values())
    assert "T4" in GPU_TYPES["aws"].hardware and "A100" in GPU_TYPES["dgx-ext"].hardware


def test_a_file_gives_its_groups_in_order(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD)
    cluster = load_cluster(str(path))
    assert cluster == Cluster.of_groups([NodeGroup("rtx", 3, 8), NodeGroup("quad", 1, 4)])
    assert cluster.describe() == "3×8 rtx + 1×4 quad"


def test_groups_of_one_type_with_different_node_sizes_make_one_uneven_type(tmp_path):
    text = '[[group]]\ngpu_type = "aws"\nnum_nodes = 2\ngpus_per_node = 8\n\n'
    text += '[[group]]\ngpu_type = "aws"\nnum_nodes = 4\ngpus_per_node = 4\n'
    cluster = parse_cluster(text, "uneven.toml")
    assert not cluster.heterogeneous and not cluster.uniform
    assert cluster.node_gpus == (8, 8, 4, 4, 4, 4)


BAD = [
    ("not toml [", "not valid TOML"),
    ("", "no [[group]]"),
    ("group = 3", "[[group]]"),
    ('name = "x"\n' + GOOD, "unknown key 'name'"),
    (GOOD.replace('"quad"', '"v100"'), "unknown gpu_type 'v100'; known: aws, azure, dgx, dgx-ext, quad, rtx"),
    (GOOD.replace("num_nodes = 1", "num_nodes = 0"), "group 2: num_nodes must be >= 1, got 0"),
    (GOOD.replace("gpus_per_node = 8", "gpus_per_node = -8"), "group 1: gpus_per_node must be >= 1, got -8"),
    (GOOD.replace("num_nodes = 3\n", ""), "group 1: missing num_nodes; add e.g. num_nodes ="),
    (GOOD.replace("gpus_per_node = 4", 'gpus_per_node = "4"'), "group 2: gpus_per_node must be a whole number"),
    (GOOD.replace("num_nodes = 3", "num_nodes = 3.5"), "group 1: num_nodes must be a whole number"),
    (GOOD.replace("num_nodes = 3", "num_nodes = true"), "group 1: num_nodes must be a whole number"),
    (GOOD.replace('gpu_type = "rtx"', "gpu_type = 8"), "group 1: gpu_type must be a quoted name"),
    (GOOD.replace("num_nodes = 1", "num_nodes = 1\ngpus = 2"), "group 2: unknown key 'gpus'"),
]


@pytest.mark.parametrize(("text", "needle"), BAD)
def test_a_bad_file_is_one_line_naming_the_file_and_what_to_fix(tmp_path, text, needle):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as error:
        load_cluster(str(path))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:")
    assert needle in message


def test_the_caller_may_narrow_the_known_types(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD)
    with pytest.raises(SpecError, match="group 2: unknown gpu_type 'quad'; known: dgx-ext, rtx"):
        read_cluster_file(path, known_types={"rtx", "dgx-ext"})
    with pytest.raises(SpecError, match="preset 'sia-physical' uses GPU type 'quad'"):
        load_cluster("sia-physical", known_types={"rtx", "dgx-ext"})
    assert load_cluster("sia-physical", known_types={"rtx", "dgx-ext", "quad"}).num_gpus == 44


def test_a_name_that_is_neither_a_preset_nor_a_file_lists_the_presets(tmp_path):
    with pytest.raises(SpecError, match=r"neither a preset .*sia-heterogeneous.* nor a file"):
        load_cluster(str(tmp_path / "nowhere.toml"))


# ---- `NAME:Kx`: a preset or file with K times the nodes of every group (Sia's Figure 9) ----------------------------


@pytest.mark.parametrize("factor", [1, 2, 4, 8, 16, 32])
def test_a_scaled_preset_has_k_times_every_groups_nodes(factor):
    cluster = load_cluster(f"sia-heterogeneous:{factor}x")
    base = load_cluster("sia-heterogeneous")
    assert cluster.num_gpus == 64 * factor
    assert [(g.gpu_type, g.num_nodes, g.gpus_per_node) for g in cluster.groups] == [
        (g.gpu_type, g.num_nodes * factor, g.gpus_per_node) for g in base.groups
    ]


def test_sia_figure_9s_largest_cluster_is_2048_gpus_of_three_types():
    cluster = load_cluster("sia-heterogeneous:32x")
    assert {t: cluster.gpus_of_type(t) for t in cluster.gpu_types} == {"aws": 768, "rtx": 768, "dgx-ext": 512}
    assert cluster.describe() == "192×4 aws + 96×8 rtx + 64×8 dgx-ext"


def test_a_cluster_file_scales_too(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD)
    assert load_cluster(f"{path}:3x") == Cluster.of_groups([NodeGroup("rtx", 9, 8), NodeGroup("quad", 3, 4)])


@pytest.mark.parametrize("suffix", ["0x", "32", "x", "-2x", "2.5x", "", "thirtytwo"])
def test_a_bad_scale_is_one_line_naming_the_cluster_and_the_form(suffix):
    with pytest.raises(SpecError) as caught:
        load_cluster(f"sia-heterogeneous:{suffix}")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"cluster 'sia-heterogeneous:{suffix}': the scale after ':' must be a whole number")
    assert "e.g. sia-heterogeneous:32x" in message


def test_a_scaled_name_of_no_preset_or_file_lists_the_presets():
    with pytest.raises(SpecError, match="cluster 'sia-hetero' is neither a preset"):
        load_cluster("sia-hetero:2x")

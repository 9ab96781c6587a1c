"""The deployment-grade ONNX export (paddle_vit.deploy.onnx_export) and its int8 quantization
(paddle_vit.deploy.quantize): the graph is what ONNX Runtime's quantizer can work on (opset 17,
one LayerNormalization per LayerNorm, every weight product fed by an initializer, no Identity)
and computes what the eager model computes."""
import numpy as np
import paddle
import pytest

from tiny_models import perturbed_tiny_vit

onnx = pytest.importorskip("onnx", reason="ONNX export needs the optional extra: pip install -e '.[onnx]'")
onnxruntime = pytest.importorskip("onnxruntime", reason="running ONNX needs the extra: pip install -e '.[onnx]'")
pytest.importorskip("paddle2onnx", reason="ONNX export needs the optional extra: pip install -e '.[onnx]'")

from paddle_vit.deploy.onnx_export import export_onnx  # noqa: E402  (after the skips)

TOLERANCE = 1e-4
# mean pooling with a pre-logits layer, any input size: the paths the plain model does not take
DYNAMIC = dict(pool="mean", representation_size=24, dynamic_img_size=True, gelu="tanh", qkv_bias=False)


def run_onnx(path, batch):
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: batch})[0]


def eager(model, batch):
    with paddle.no_grad():
        return model(paddle.to_tensor(batch)).numpy()


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    model = perturbed_tiny_vit()
    path = tmp_path_factory.mktemp("onnx") / "plain.onnx"
    return model, path, export_onnx(model, path)


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory):
    model = perturbed_tiny_vit(**DYNAMIC)
    path = tmp_path_factory.mktemp("onnx") / "dynamic.onnx"
    return model, path, export_onnx(model, path)


def test_the_export_computes_the_eager_logits_for_any_batch(plain):
    model, path, _ = plain
    for batch_size in (1, 3):
        batch = np.random.default_rng(batch_size).standard_normal((batch_size, 3, 32, 32)).astype("float32")
        np.testing.assert_allclose(run_onnx(path, batch), eager(model, batch), atol=TOLERANCE, rtol=0)


def test_a_dynamic_size_export_with_mean_pool_and_pre_logits_computes_the_eager_logits_at_any_size(dynamic):
    model, path, report = dynamic
    assert report["input_shape"] == ["batch", 3, "height", "width"]
    for side in (32, 48):
        batch = np.random.default_rng(side).standard_normal((2, 3, side, side)).astype("float32")
        np.testing.assert_allclose(run_onnx(path, batch), eager(model, batch), atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("export", ["plain", "dynamic"])
def test_the_graph_is_built_for_deployment(export, request):
    model, path, report = request.getfixturevalue(export)
    graph_model = onnx.load(str(path))
    onnx.checker.check_model(graph_model, full_check=True)
    graph = graph_model.graph
    initializers = {tensor.name for tensor in graph.initializer}
    ops = [node.op_type for node in graph.node]
    assert report["opset"] == 17 and {entry.domain for entry in graph_model.opset_import} <= {"", "ai.onnx"}
    assert "Identity" not in ops and "Constant" not in ops
    layer_norms = [layer for layer in model.sublayers() if isinstance(layer, paddle.nn.LayerNorm)]
    assert ops.count("LayerNormalization") == len(layer_norms) == 2 * 2 + 1
    # each Linear of the encoder and the head: a MatMul/Gemm whose weight is an initializer
    linears = [layer for layer in model.sublayers() if isinstance(layer, paddle.nn.Linear)]
    products = [node for node in graph.node if node.op_type in ("MatMul", "Gemm")]
    assert {linear.weight.name for linear in linears} <= {node.input[1] for node in products} & initializers
    on_weights = [node for node in products if node.input[1] in initializers]
    assert report["weight_products"] == len(on_weights) >= len(linears) >= 2 * 4 + 1  # qkv, proj, fc1, fc2; head
    # the attention's two products of activations per layer (and the dynamic size's resampling)
    assert report["activation_products"] == len(products) - len(on_weights) >= 2 * 2
    assert report["nodes"] == len(ops) == sum(report["node_counts"].values())
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


# ---- int8 (paddle_vit.deploy.quantize) -----------------------------------------------------------

def calibration(count=2):
    return [np.random.default_rng(seed).standard_normal((4, 3, 32, 32)).astype("float32") for seed in range(count)]


def test_dynamic_int8_fuses_each_attention_quantizes_its_projections_and_keeps_the_embedding_and_head_fp32(
        plain, tmp_path):
    from paddle_vit.deploy.quantize import DEFAULT_KEEP_FP32, compare_logits, quantize_onnx

    model, path, _ = plain
    report = quantize_onnx(path, tmp_path / "int8.onnx")
    graph = onnx.load(str(tmp_path / "int8.onnx")).graph
    assert report["mode"] == "dynamic" and set(report["kept_fp32"]) == set(DEFAULT_KEEP_FP32)
    assert report["fused_attention"] == 2
    # per layer: the fused attention (its qkv projection), proj, fc1, fc2
    assert len(report["quantized"]) == 2 * 4
    ops = [node.op_type for node in graph.node]
    assert ops.count("QAttention") == 2 and ops.count("MatMulInteger") == 2 * 3
    assert "Softmax" not in ops and "Split" not in ops  # inside QAttention, in float32
    assert ops.count("Conv") == 1 and ops.count("Gemm") + ops.count("MatMul") == 1  # patch embedding, head: fp32
    gate = compare_logits(path, tmp_path / "int8.onnx", calibration(), labels=[0] * 8)
    assert gate["images"] == 8 and gate["top1_agreement"] >= 0.75 and 0 < gate["max_logit_difference"] < 0.5
    assert {"top1_fp32", "top1_int8"} <= set(gate)


def test_int8_of_a_dynamic_size_export_keeps_the_position_embedding_resampling_fp32_and_runs_at_any_size(
        dynamic, tmp_path):
    """The resampling products (a 3-D constant grid, and products of activations outside any
    attention) are in no role: per-channel quantization of the grid made onnxruntime refuse to run."""
    from paddle_vit.deploy.quantize import node_roles, quantize_onnx

    model, path, _ = dynamic
    roles = node_roles(onnx.load(str(path)).graph)
    assert len(roles["attention_products"]) == 2 * 2 and len(roles["weight_products"]) == 2 * 4
    assert len(roles["head"]) == 2  # pre-logits and classifier
    unfused = quantize_onnx(path, tmp_path / "unfused.onnx", keep_fp32=("patch_embedding", "head"))
    assert len(unfused["quantized"]) == 2 * 4 + 2 * 2  # not the resampling
    report = quantize_onnx(path, tmp_path / "int8.onnx")
    assert report["fused_attention"] == 2
    for side in (32, 48):
        batch = np.random.default_rng(side).standard_normal((2, 3, side, side)).astype("float32")
        reference = eager(model, batch)
        for name in ("int8.onnx", "unfused.onnx"):
            assert np.abs(run_onnx(tmp_path / name, batch) - reference).max() < 0.1 * np.abs(reference).max()


def test_dynamic_int8_of_the_attention_products_leaves_the_attention_unfused(plain, tmp_path):
    from paddle_vit.deploy.quantize import quantize_onnx

    _, path, _ = plain
    report = quantize_onnx(path, tmp_path / "int8.onnx", keep_fp32=("patch_embedding", "head"))
    ops = [node.op_type for node in onnx.load(str(tmp_path / "int8.onnx")).graph.node]
    assert report["fused_attention"] == 0 and "QAttention" not in ops
    # qkv, proj, fc1, fc2 and the attention's two activation products of both layers
    assert len(report["quantized"]) == ops.count("MatMulInteger") == 2 * 4 + 2 * 2
    batch = calibration(1)[0]
    assert np.abs(run_onnx(tmp_path / "int8.onnx", batch) - run_onnx(path, batch)).max() < 0.5


# ---- the fused attention (paddle_vit.deploy.onnx_fusion) ------------------------------------------

def fused_copy(path, tmp_path):
    from paddle_vit.deploy.onnx_fusion import fuse_attention

    model = onnx.load(str(path))
    count = fuse_attention(model)
    onnx.save(model, str(tmp_path / "fused.onnx"))
    return count, model, tmp_path / "fused.onnx"


@pytest.mark.parametrize("export", ["plain", "dynamic"])  # dynamic: no qkv bias, any size
def test_the_fused_attention_computes_the_eager_logits(export, request, tmp_path):
    model, path, _ = request.getfixturevalue(export)
    count, fused, fused_path = fused_copy(path, tmp_path)
    assert count == 2
    attentions = [node for node in fused.graph.node if node.op_type == "Attention"]
    heads = model.config.num_heads
    scale = (model.config.embed_dim // heads) ** -0.5
    for node in attentions:
        attributes = {attribute.name: onnx.helper.get_attribute_value(attribute) for attribute in node.attribute}
        assert attributes["num_heads"] == heads and attributes["scale"] == pytest.approx(scale)
    ops = [node.op_type for node in fused.graph.node]
    unfused = [node.op_type for node in onnx.load(str(path)).graph.node]
    assert "Softmax" not in ops and "Split" not in ops and ops.count("Attention") == 2
    # per layer the qkv projection and the two products of activations went into the Attention node
    products = [ops.count("MatMul") + ops.count("Gemm"), unfused.count("MatMul") + unfused.count("Gemm")]
    assert products[1] - products[0] == 2 * 3
    sides = (32, 48) if export == "dynamic" else (32,)
    for side in sides:
        batch = np.random.default_rng(side).standard_normal((3, 3, side, side)).astype("float32")
        np.testing.assert_allclose(run_onnx(fused_path, batch), eager(model, batch), atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(run_onnx(fused_path, batch), run_onnx(path, batch), atol=1e-5, rtol=0)


def test_an_attention_that_differs_from_the_pattern_is_left_alone(plain, tmp_path):
    from paddle_vit.deploy.onnx_fusion import fuse_attention

    _, path, _ = plain
    model = onnx.load(str(path))
    # the first layer's k no longer transposed: q k would not be the attention's scores
    transposes = [node for node in model.graph.node if node.op_type == "Transpose"
                  and list(onnx.helper.get_attribute_value(node.attribute[0])) == [0, 2, 3, 1]]
    assert len(transposes) == 2
    transposes[0].attribute[0].ints[:] = [0, 2, 1, 3]
    before = [node.op_type for node in model.graph.node]
    assert fuse_attention(model) == 1  # the second layer only
    after = [node.op_type for node in model.graph.node]
    assert after.count("Softmax") == before.count("Softmax") - 1 == 1


def test_the_onnxruntime_session_runs_a_float32_file_fused(plain):
    from paddle_vit.deploy.onnx_runtime import OnnxSession

    model, path, _ = plain
    fused, unfused = OnnxSession(path, threads=1), OnnxSession(path, threads=1, fuse=False)
    assert (fused.fused_attention, unfused.fused_attention) == (2, 0)
    batch = calibration(1)[0]
    np.testing.assert_allclose(fused(batch), unfused(batch), atol=1e-5, rtol=0)
    np.testing.assert_allclose(fused(batch), eager(model, batch), atol=TOLERANCE, rtol=0)


def test_static_int8_calibrates_and_quantizes_the_attention_products_unless_kept(plain, tmp_path):
    from paddle_vit.deploy.quantize import quantize_onnx

    _, path, _ = plain
    kept = quantize_onnx(path, tmp_path / "kept.onnx", mode="static", calibration_batches=calibration(),
                         keep_fp32=("patch_embedding", "head", "attention_products"))
    every = quantize_onnx(path, tmp_path / "every.onnx", mode="static", calibration_batches=calibration(),
                          keep_fp32=())
    assert len(kept["quantized"]) == 2 * 4 and len(kept["kept_fp32"]["attention_products"]) == 2 * 2
    assert len(every["quantized"]) == 2 * 4 + 2 * 2 + 1 + 1  # + the attention products, the head, the Conv
    assert every["node_counts"]["DequantizeLinear"] > kept["node_counts"]["DequantizeLinear"] > 0
    batch = calibration(1)[0]
    for name in ("kept.onnx", "every.onnx"):
        assert np.abs(run_onnx(tmp_path / name, batch) - run_onnx(path, batch)).max() < 0.5


def test_static_int8_without_calibration_is_refused(plain, tmp_path):
    from paddle_vit.deploy.quantize import ExportError, quantize_onnx

    with pytest.raises(ExportError, match="calibration"):
        quantize_onnx(plain[1], tmp_path / "x.onnx", mode="static")
    with pytest.raises(ExportError, match="keep_fp32 takes"):
        quantize_onnx(plain[1], tmp_path / "x.onnx", keep_fp32=("softmax",))
    with pytest.raises(ExportError, match="cannot write to"):
        quantize_onnx(plain[1], tmp_path / "missing" / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()


def test_reduce_range_follows_the_cpu_int8_instructions():
    from paddle_vit.deploy.quantize import cpu_has_vnni

    assert cpu_has_vnni({"avx2", "avx512_vnni"}) and cpu_has_vnni({"avx_vnni"}) and cpu_has_vnni({"amx_int8"})
    assert not cpu_has_vnni({"avx2", "fma"})


def test_identity_nodes_are_removed_and_an_output_keeps_its_name():
    from onnx import TensorProto, helper

    from paddle_vit.deploy.onnx_export import drop_identities

    nodes = [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Identity", ["b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    drop_identities(graph)
    assert [(node.op_type, list(node.input), list(node.output)) for node in graph.node] == [("Relu", ["x"], ["y"])]
    session = onnxruntime.InferenceSession(helper.make_model(graph).SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.array([-1.0, 2.0], "float32")})[0].tolist() == [0.0, 2.0]


def test_a_dynamic_size_export_of_a_fixed_size_model_is_refused(plain, tmp_path):
    from paddle_vit.errors import ExportError

    with pytest.raises(ExportError, match="dynamic_img_size"):
        export_onnx(plain[0], tmp_path / "x.onnx", dynamic_size=True)
    assert not (tmp_path / "x.onnx").exists()

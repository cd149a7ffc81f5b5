"""Label findings on foreign rows: wrong labels, missing labels and unknown operators are told apart."""

from operators.labels import label_findings


def test_a_true_label_with_glue_arithmetic_between_operators_is_clean():
    f = label_findings(["nn.Conv2d", "torch.tanh"], ["aten.convolution", "aten.add", "aten.mul", "aten.tanh", "aten.view"])
    assert f.kind == "labels true" and not (f.wrong or f.missing or f.unknown)


def test_a_labelled_operator_that_never_ran_is_a_wrong_label():
    f = label_findings(["nn.Tanh", "torch.abs"], ["aten.convolution", "aten.abs"])
    assert f.wrong == ("nn.Tanh",) and f.kind == "wrong label"
    assert f.missing == ("aten.convolution",)
    assert "labelled but never ran: nn.Tanh" in f.reason()


def test_an_operator_that_ran_without_a_label_is_a_missing_label():
    f = label_findings(["F.smooth_l1_loss"], ["aten.avg_pool2d", "aten.smooth_l1_loss"])
    assert f.kind == "missing label" and f.missing == ("aten.avg_pool2d",) and not f.wrong


def test_an_unknown_operator_is_never_a_mismatch():
    f = label_findings(["nn.FancyNewLayer", "torch.relu"], ["aten.relu", "aten.some_kernel"])
    assert f.kind == "cannot judge"
    assert f.unknown == ("nn.FancyNewLayer",) and f.unjudged == ("aten.some_kernel",)
    assert not f.wrong and not f.missing and f.reason() == ""


def test_foreign_operators_are_pinned_and_device_kernels_merge():
    # nn.LSTM: decomposed on meta, one cuDNN kernel on a GPU; batch norm through cuDNN on a GPU
    assert label_findings(["nn.LSTM"], ["aten._cudnn_rnn", "aten.transpose"], "cuda").kind == "labels true"
    assert label_findings(["torch.isin"], ["aten.isin"]).kind == "labels true"
    assert label_findings(["nn.SyncBatchNorm"], ["aten.cudnn_batch_norm"], "cuda").kind == "labels true"
    assert label_findings(["F.batch_norm"], ["aten.cudnn_batch_norm"], "cuda").kind == "labels true"
    # in-place forms are their op; foreign spellings of catalog operators count
    assert label_findings(["F.mish"], ["aten.mish_"]).kind == "labels true"
    assert label_findings(["nn.LazyConv3d", "add"], ["aten.convolution", "aten.add"]).kind == "labels true"


def test_container_labels_need_no_kernel_but_explain_none():
    f = label_findings(["nn.Sequential", "nn.ReLU"], ["aten.relu", "aten.convolution"])
    assert f.kind == "missing label" and f.missing == ("aten.convolution",)
    assert label_findings(["nn.Identity", "torch.relu"], ["aten.relu"]).kind == "labels true"


def test_a_composite_operator_needs_most_of_its_kernels():
    # a lone addmm is not a multi-head attention
    assert label_findings(["nn.MultiheadAttention"], ["aten.addmm"]).kind == "wrong label"

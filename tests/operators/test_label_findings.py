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


def test_mask_operators_between_operators_are_glue():
    # ~(x == y) as an attention mask: the comparison and its negation are glue, not an unlabelled operator
    f = label_findings(["torch.eq", "F.scaled_dot_product_attention"],
                       ["aten.eq", "aten.bitwise_not", "aten._safe_softmax", "aten.bmm", "aten.mul", "aten.where"])
    assert f.kind == "labels true", f
    # a named bitwise operator that is labelled still needs its kernel
    assert label_findings(["torch.bitwise_xor"], ["aten.bitwise_not"]).wrong == ("torch.bitwise_xor",)


def test_a_decomposed_loss_explains_its_reduction_a_fused_one_does_not():
    # the catalog pins losses at reduction="none"; foreign code keeps the default mean (or asks for a sum)
    assert label_findings(["nn.L1Loss"], ["aten.sub", "aten.abs", "aten.mean"]).kind == "labels true"
    assert label_findings(["F.margin_ranking_loss"], ["aten.neg", "aten.mul", "aten.add", "aten.clamp_min_",
                                                      "aten.sum"]).kind == "labels true"
    # cross entropy reduces inside nll_loss: a mean beside it is the code's own
    f = label_findings(["nn.CrossEntropyLoss"], ["aten._log_softmax", "aten.nll_loss_forward", "aten.mean"])
    assert f.missing == ("aten.mean",)
    # a reduction next to a non-loss operator is still a missing label
    f = label_findings(["torch.abs"], ["aten.abs", "aten.mean"])
    assert f.missing == ("aten.mean",)


def test_a_lazy_module_explains_its_first_forward_initialization():
    assert label_findings(["nn.LazyConvTranspose3d"], ["aten.convolution", "aten.uniform_"]).kind == "labels true"
    assert label_findings(["nn.ConvTranspose3d"], ["aten.convolution", "aten.uniform_"]).missing == ("aten.uniform",)


def test_foreign_pins_cover_arguments_the_sampler_does_not_draw():
    # AdaptiveLogSoftmaxWithLoss with head_bias=True: its head is an addmm, not an mm
    traced = ["aten.addmm", "aten.mm", "aten._log_softmax", "aten.gather", "aten.index_select", "aten.nonzero",
              "aten.lt", "aten.ge", "aten.bitwise_and", "aten.index_copy_", "aten.index_fill_", "aten.neg", "aten.mean"]
    assert label_findings(["nn.AdaptiveLogSoftmaxWithLoss"], traced).kind == "labels true"
    # instance norm with running stats averages the batch's statistics into them
    f = label_findings(["nn.InstanceNorm2d"], ["aten.repeat", "aten.native_batch_norm", "aten.mean", "aten.copy_"])
    assert f.kind == "labels true", f
    # F.multi_head_attention_forward(need_weights=False) traced on meta runs the math attention path
    traced = ["aten.addmm", "aten.mm", "aten.bmm", "aten._safe_softmax", "aten.mul", "aten.view", "aten.transpose"]
    assert label_findings(["F.multi_head_attention_forward"], traced).kind == "labels true"


def test_fills_and_tensor_subscripts_between_operators_are_glue():
    # x[:, :, torch.triu(torch.ones(h, w, dtype=bool))]: the fill and the subscript are not operators to label
    f = label_findings(["nn.ConvTranspose2d", "torch.triu"], ["aten.convolution", "aten.add", "aten.ones", "aten.triu",
                                                               "aten.index"])
    assert f.kind == "labels true", f
    # torch.where(torch.isnan(x), torch.full_like(x, 0), x): the fill is glue, torch.where is an operator
    f = label_findings(["torch.isnan", "F.group_norm"], ["aten.isnan", "aten.full_like", "aten.where",
                                                         "aten.native_group_norm"])
    assert f.missing == ("aten.where",)


def test_a_layout_label_needs_no_kernel_and_interpolation_modes_are_pinned():
    # nn.Flatten after an LSTM copies (reshape of a non-contiguous output): no view ran, the label is still true
    f = label_findings(["nn.Flatten", "torch.log_softmax"], ["aten.clone", "aten._unsafe_view", "aten._log_softmax"])
    assert f.kind == "labels true", f
    # an arithmetic label still needs its kernel (a "mul" label with no multiplication is wrong)
    assert label_findings(["mul", "torch.selu"], ["aten.selu"]).wrong == ("mul",)
    # F.interpolate in bicubic mode (the catalog draws nearest, linear modes)
    assert label_findings(["F.interpolate"], ["aten.upsample_bicubic2d"]).kind == "labels true"
    # x ** 2 is arithmetic between operators, as x * x is
    assert label_findings(["torch.abs"], ["aten.abs", "aten.pow"]).kind == "labels true"


def test_an_embedding_bag_with_explicit_offsets_is_its_label():
    # 1-D indices with offsets run the bag kernel alone (the catalog's 2-D form also builds offsets with arange)
    assert label_findings(["nn.EmbeddingBag"], ["aten._embedding_bag"]).kind == "labels true"
    assert label_findings(["F.embedding_bag"], ["aten._embedding_bag_forward_only"]).kind == "labels true"
    assert label_findings(["F.embedding_bag"], ["aten._embedding_bag"]).kind == "labels true"
    assert label_findings(["nn.EmbeddingBag"], ["aten.embedding"]).kind == "wrong label"

// The kernels of the other sources that the encoder layer (encoder_layer.cc) calls directly:
// each takes and returns tensors as its op does (attention_softmax.cc, gelu.cc,
// layer_norm_backward.cc).
#pragma once

#include <vector>

#include "paddle/extension.h"

std::vector<paddle::Tensor> Softmax(const paddle::Tensor& x, int threads);
std::vector<paddle::Tensor> SoftmaxBackward(const paddle::Tensor& p, const paddle::Tensor& dp, int threads);
// evaluation's, in place: the softmax over x's last axis; GELU(x + bias), bias over x's last axis
void SoftmaxInPlace(paddle::Tensor& x, int threads);
void BiasedGeluInPlace(paddle::Tensor& x, const paddle::Tensor& bias, int threads);
std::vector<paddle::Tensor> Gelu(const paddle::Tensor& x, int threads);
std::vector<paddle::Tensor> GeluBackward(const paddle::Tensor& x, const paddle::Tensor& dy, int threads);
std::vector<paddle::Tensor> LayerNormBackward(const paddle::Tensor& x, const paddle::Tensor& weight,
                                              const paddle::Tensor& mean, const paddle::Tensor& variance,
                                              const paddle::Tensor& grad, float epsilon, int threads);

"""ringflow.nn: the neural-network ops under TensorFlow's tf.nn names."""

from ringflow.ops import (bias_add, relu, sigmoid, softmax,
                          sparse_softmax_cross_entropy_with_logits, tanh)

__all__ = ["bias_add", "relu", "sigmoid", "softmax",
           "sparse_softmax_cross_entropy_with_logits", "tanh"]

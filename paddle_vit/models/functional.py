"""Small operations the modules share."""


def mean_over(x, axes):
    """The mean over `axes` (kept), as a sum times 1/count: the same numbers as ``mean``, but a
    traced ``mean`` makes Paddle Inference's oneDNN pass print "ReduceMeanCheckIfOneDNNSupport"
    on stdout once per op, into the output of eval.py and predict.py."""
    count = 1
    for axis in axes:
        count *= x.shape[axis]
    return x.sum(axis=axes, keepdim=True) * (1.0 / count)

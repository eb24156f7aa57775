"""Whether two listings are one product: the shipped pair model and its calibrated ``p_same``.

Below the stages: clustering judges candidate pairs with it, the audit judges a dataset's pairs,
labels refit it and the report reads its calibration, so none of them imports another for it.
"""

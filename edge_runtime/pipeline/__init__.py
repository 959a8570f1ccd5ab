"""The streaming pipeline: source → preprocess → infer → decode → publish, with the stages overlapping.

`preprocess` turns a frame or a sensor window into the model's input tensor, `streaming` runs the stages
on their threads, and `results` builds the result message subscribers read.
"""

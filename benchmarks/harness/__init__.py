"""What the benchmark scripts share: the data they generate or mine, the runs they make and measure
(a clustering run, a build stage by stage, processes sampled for memory), and the cells of their
tables. A script imports from here and never from another script, so each script stays one
measurement that runs on its own, and what two of them share has one home.
"""

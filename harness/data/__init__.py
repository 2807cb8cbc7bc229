"""The on-disk data path: LeRobotDataset v3.0 folders, written from episode sources and read as samples.

lerobot_format  the layout and its facts (paths, features, info.json)
stats           per-feature statistics as LeRobot computes them
fingerprint     the digests of what a dataset holds (recorded by training runs)
video           MP4 encode, append and decode through PyAV
writer          `Episode`, `write_dataset` (atomic) from any iterable of episodes
synthetic       the synthetic episode source
dataset         `LeRobotV3Dataset`, the reader
make            a dataset folder written with progress lines (`vlabench make-dataset`), a workload's made when missing
pipeline        from dataset samples to batches on the device, inside the timed step
"""

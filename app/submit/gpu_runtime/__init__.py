"""What the submitters that drive a GPU share, below all of them (no submitter imports another):
which GPU a rank's loops run on (`device`), where the GPU reaches each queue and buffer
(`device_map`), the effective SM clock measured in a kernel (`smclock`), and locking the SM clock
for the clock-control shape (`clock_lock`)."""

"""What an engine reads of its machine: sensors (NVML, AMD sysfs, CPU), thermal pauses, the
fleet's host memory."""

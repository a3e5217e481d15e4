"""NVIDIA PTX: the text builder, the mma.sync shapes, the CUDA driver binding and the SIMT reference interpreter."""

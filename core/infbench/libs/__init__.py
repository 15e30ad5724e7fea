"""Thin helpers around the engine libraries' own APIs (llama.cpp's C API), shared by the
engines and the quality tools above them."""

"""CUDA C++ sources (shipped as package data) and their build/load helpers."""

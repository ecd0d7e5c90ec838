"""Ahead-of-time compilation (tfcompile / saved_model_cli aot_compile_cpu style).

    config.py    tf2xla.Config: feeds and fetches with static shapes
    frontend.py  frozen GraphDef or SavedModel signature -> one cluster
    compile.py   the JIT's stages -> a relocatable object (kernels + driver.py's entry points)
    header.py    C entry points and a C++ class (XlaCompiledCpuFunction-like)
    cli.py       the ``tfjit-aot`` command
"""

"""llama-cpp-python built for the machine it runs on.

llama.cpp's default build (``GGML_NATIVE``) compiles for whatever the build machine's CPUID advertises.
A virtual machine can advertise instructions it cannot run (AMX tiles on some Xeon hosts: the first
``ldtilecfg`` faults), so the appliance never builds native on x86-64: it picks an explicit
instruction-set profile from the processor's features, with AMX always off, keys the cached wheel by that
profile, and checks the installed build with a smoke decode in a child process (``engines.llm.smoke``).

Standard library only: this runs before the project's dependencies are installed.
"""

"""The kernel cache as a writer for the crash test (tests/test_crash_consistency.py):
`main([cache, library])` loads the compiled kernels from the cache folder `cache`, the build's
compiler output stood in for by a copy of the already built `library` (the cache's own calls are
what the test kills at; a real build takes half a minute a point)."""
import os
import shutil


def main(argv):
    cache, built = argv
    os.environ["XDG_CACHE_HOME"] = cache
    from paddle_vit.variants import compiled

    def compiled_by_copy(folder, name, target_flags):
        compiled._copy_sources(folder)
        with open(os.path.join(folder, "build.log"), "a") as log:
            log.write(f"{compiled.BUILD_HEADER} {name} by process {os.getpid()} (a copy)\n")
        target = os.path.join(folder, name, f"{name}.so")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)

    compiled._build_in_child = compiled_by_copy
    compiled._LOADED.clear()
    return 0 if compiled._build(compiled.cache_folder()) is not None else 3

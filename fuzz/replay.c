/* fuzz/replay.c - a main() for the fuzz targets without libFuzzer: runs
   LLVMFuzzerTestOneInput once on every file named (directories: every file
   inside). `make test` builds each target with it (gcc, ASan + UBSan) and
   replays the committed seed corpus, so the targets and their seeds stay
   valid where clang's libFuzzer runtime is missing; a crash input saved by
   `make fuzz` replays the same way:  build/fuzz-replay/fuzz_cache FILE    */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;
    if (!f) return 0;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return 0;
    }
    buf = (uint8_t *)malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); fclose(f); return 0; }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);    /* a failed property aborts */
    free(buf);
    return 1;
}

int main(int argc, char **argv)
{
    int i, ran = 0, bad = 0;
    for (i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (d) {
            struct dirent *e;
            char path[4096];
            while ((e = readdir(d)) != NULL) {
                if (e->d_name[0] == '.') continue;
                snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
                if (replay_file(path)) ran++; else bad++;
            }
            closedir(d);
        } else if (replay_file(argv[i])) ran++;
        else bad++;
    }
    printf("%s: %d passed, %d failed\n", argc > 0 ? argv[0] : "replay", ran, bad);
    return bad != 0 || ran == 0;
}

/* bench/qemu_insn.c - a QEMU TCG plugin that counts the guest instructions
   a process executes, for bench_cpu --instr on an AArch64 build of
   bench_cpu.c where there is no AArch64 CPU (bench/instr_count.sh).

       gcc -shared -fPIC -O2 -o build/instr/qemu_insn.so bench/qemu_insn.c
       qemu-aarch64 -plugin build/instr/qemu_insn.so -d plugin PROGRAM ARGS
         -> "insns: N" on stderr when PROGRAM exits

   Each translated block adds its instruction count to one counter each
   time it starts (an inline add: no callback, so the guest runs at near
   its usual emulated speed). A block left early by an exception would be
   counted whole; bench_cpu's counted calls raise none, and it subtracts a
   run without the counted call, so what remains is the call's own.

   Debian ships qemu-user without qemu-plugin.h, so the five entry points
   used are declared here as QEMU 7.2's header declares them (plugin API
   version 1). For a QEMU whose minimum plugin API is higher, build against
   its own qemu-plugin.h instead.                                          */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef QEMU_INSN_API_VERSION
#define QEMU_INSN_API_VERSION 1
#endif

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                              void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *),
                                    void *userdata);
void qemu_plugin_outs(const char *string);

#define EXPORT __attribute__((visibility("default")))
EXPORT int qemu_plugin_version = QEMU_INSN_API_VERSION;

static uint64_t insns;       /* one guest thread: bench_cpu is single-threaded */

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &insns,
                                             qemu_plugin_tb_n_insns(tb));
}

static void on_exit(qemu_plugin_id_t id, void *userdata)
{
    char line[64];
    (void)id; (void)userdata;
    snprintf(line, sizeof line, "insns: %llu\n", (unsigned long long)insns);
    qemu_plugin_outs(line);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                               char **argv);
EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                               char **argv)
{
    (void)info; (void)argc; (void)argv;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit, NULL);
    return 0;
}

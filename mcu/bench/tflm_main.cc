// tflm_main.cc - the TensorFlow Lite Micro side of `tinyol bench --tflm`.
//
// Our own harness around TFLM's public API (tflite::MicroInterpreter): runs
// the model in bench_case.h on its input twice under the SysTick counter of
// bench_rt.c. Pass 1 times Invoke() as a whole (the figure compared with
// tinyol's backbone) and paints the stack around it; pass 2 wraps every
// operator's invoke() in a timer for the per-operator table. AllocateTensors()
// is not counted (it runs once at start-up). Output lines "key value" on the
// semihosting console are parsed by host/tinyol/tflm_bench.py.
#include <cstddef>
#include <cstdint>
#include <new>

#include "bench_case.h"
#include "bench_rt.h"
#include "tensorflow/lite/micro/cortex_m_generic/debug_log_callback.h"
#include "tensorflow/lite/micro/micro_allocator.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"

namespace {

constexpr int kMaxOps = 256;
constexpr int kOpTypes = TOL_BENCH_N_OP_TYPES;

// The arena: one block in SRAM1, or (TOL_BENCH_SPLIT_ARENA) TFLM's persistent
// allocations in SRAM2 and the activations in SRAM1, for models whose single
// arena does not fit one SRAM block.
alignas(16) uint8_t arena[TOL_BENCH_ARENA_BYTES];
#if TOL_BENCH_SPLIT_ARENA
__attribute__((section(".ram2"))) alignas(16) uint8_t persist_arena[TOL_BENCH_PERSIST_BYTES];
#endif
alignas(tflite::MicroInterpreter) uint8_t interp_mem[sizeof(tflite::MicroInterpreter)];

// per-operator timing: each registration's invoke goes through a trampoline
TfLiteStatus (*orig_invoke[kOpTypes])(TfLiteContext*, TfLiteNode*);
uint64_t op_ticks[kMaxOps];
int32_t op_code[kMaxOps];
int n_ops;

template <int K>
TfLiteStatus timed_invoke(TfLiteContext* ctx, TfLiteNode* node) {
  const uint64_t t0 = tol_bench_ticks();
  const TfLiteStatus s = orig_invoke[K](ctx, node);
  const uint64_t t1 = tol_bench_ticks();
  if (n_ops < kMaxOps) {
    op_ticks[n_ops] = t1 - t0;
    op_code[n_ops] = K;
    n_ops++;
  }
  return s;
}

template <int K>
TFLMRegistration timed(TFLMRegistration r) {
  orig_invoke[K] = r.invoke;
  r.invoke = timed_invoke<K>;
  return r;
}

using Resolver = tflite::MicroMutableOpResolver<kOpTypes>;

// The model's operators (bench_case.h, written by tflm_bench.py from its table of every
// operator tinyol exports): X(K, builtin name, resolver method). K indexes kOpNames.
#define TOL_OP_NAME(K, NAME, ADD) #NAME,
const char* const kOpNames[kOpTypes] = {TOL_BENCH_OPS(TOL_OP_NAME)};
#undef TOL_OP_NAME

void add_ops(Resolver& r, bool timing) {
#define TOL_OP_ADD(K, NAME, ADD) \
  if (timing) {                  \
    r.ADD(timed<K>(tflite::Register_##NAME())); \
  } else {                       \
    r.ADD();                     \
  }
  TOL_BENCH_OPS(TOL_OP_ADD)
#undef TOL_OP_ADD
}

tflite::MicroInterpreter* make_interpreter(const tflite::Model* model, const Resolver& resolver) {
#if TOL_BENCH_SPLIT_ARENA
  tflite::MicroAllocator* alloc = tflite::MicroAllocator::Create(
      persist_arena, sizeof(persist_arena), arena, sizeof(arena));
  if (alloc == nullptr) return nullptr;
  return new (interp_mem) tflite::MicroInterpreter(model, resolver, alloc);
#else
  return new (interp_mem) tflite::MicroInterpreter(model, resolver, arena, sizeof(arena));
#endif
}

int run(const tflite::Model* model, bool timing) {
  Resolver resolver;
  add_ops(resolver, timing);
  tflite::MicroInterpreter* interp = make_interpreter(model, resolver);
  if (interp == nullptr || interp->AllocateTensors() != kTfLiteOk) {
    tol_bench_puts("error AllocateTensors\n");
    return 2;
  }
  TfLiteTensor* in = interp->input(0);
  if (in->bytes != TOL_BENCH_INPUT_SIZE) {
    tol_bench_puts("error input size\n");
    return 3;
  }
  for (size_t i = 0; i < in->bytes; i++) in->data.int8[i] = tol_bench_input[i];
  n_ops = 0;
  const uintptr_t sp = timing ? 0 : tol_bench_stack_paint();
  const uint64_t t_ref0 = tol_bench_ticks();
  const uint64_t t_ref1 = tol_bench_ticks();
  const uint64_t t0 = tol_bench_ticks();
  const TfLiteStatus s = interp->Invoke();
  const uint64_t t1 = tol_bench_ticks();
  if (s != kTfLiteOk) {
    tol_bench_puts("error Invoke\n");
    return 4;
  }
  if (!timing) {
    tol_bench_kv("stack", tol_bench_stack_used(sp));
    tol_bench_kv("invoke_ticks", t1 - t0);
    tol_bench_kv("overhead_ticks", t_ref1 - t_ref0);
    tol_bench_kv("arena_used", interp->arena_used_bytes());
    const TfLiteTensor* out = interp->output(0);
    tol_bench_hex("output", out->data.int8, static_cast<uint32_t>(out->bytes));
  } else {
    for (int i = 0; i < n_ops; i++) {
      tol_bench_puts("op ");
      tol_bench_kv(kOpNames[op_code[i]], op_ticks[i]);
    }
  }
  interp->~MicroInterpreter();
  return 0;
}

}  // namespace

static void log_line(const char* s) { tol_bench_puts(s); }

extern "C" int tol_bench_main(void) {
  RegisterDebugLogCallback(log_line);  // TFLM's own messages (e.g. why AllocateTensors failed)
  const tflite::Model* model = tflite::GetModel(tol_bench_model);
  int rc = run(model, false);
  if (rc == 0) rc = run(model, true);
  tol_bench_puts(rc == 0 ? "done\n" : "failed\n");
  return rc;
}

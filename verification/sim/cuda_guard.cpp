// A CUDA device guard for CPU-only torch: one device, index 0, nothing to switch; events
// are no-ops (work runs in issue order). And, while the simulator is open, CUDA as torch's
// accelerator: the autograd engine asks the accelerator for the current stream of every
// CUDA gradient, and CPU torch has none.
#include <typeinfo>

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {
struct SimulatedCudaGuard final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::CUDA;
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device) const override { return c10::Device(kType, 0); }
  c10::Device getDevice() const override { return c10::Device(kType, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kType, 0));
  }
  c10::Stream exchangeStream(c10::Stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kType, 0));
  }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag)
      const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
};
C10_REGISTER_GUARD_IMPL(CUDA, SimulatedCudaGuard);

// Built in: CUDA and nothing else. It adds no data members, so it can lend its vtable to
// the stub hooks object CPU torch made at start-up.
//
// Why a vtable swap and not a registration: at::detail::getCUDAHooks() asks the
// CUDAHooksRegistry (C10_REGISTER_TYPED_CLASS(CUDAHooksRegistry, "CUDAHooks", ...)) once, on
// its first call, and keeps what it made in a function-local static for good. CPU torch makes
// that first call while it starts, before any extension can register, so a registration
// would never be consulted; and the simulator must also give CPU torch its stub back when it
// closes. Overwriting the vtable pointer of a live object is outside C++'s rules, so
// cuda_guard.py does it only on torch versions it was checked on, and checks torch's own
// accelerator query after swapping and after restoring.
struct SimulatedCudaHooks final : public at::CUDAHooksInterface {
  bool isBuilt() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return false; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex) const override {}
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex) const override { return 0; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return 0; }
};
static_assert(sizeof(SimulatedCudaHooks) == sizeof(at::CUDAHooksInterface),
              "the simulated hooks must have the stub's layout to lend it their vtable");
}  // namespace

// 1 if torch's CUDA hooks are CPU torch's stub (the swap applies), 0 on a CUDA build.
extern "C" int bcg_sim_hooks_are_stub() {
  return typeid(at::detail::getCUDAHooks()) == typeid(at::CUDAHooksInterface) ? 1 : 0;
}

// Makes CUDA torch's accelerator (on != 0) or restores CPU torch's stub; 0 if the hooks
// are not the stub (a CUDA build), where nothing is changed.
extern "C" int bcg_sim_cuda_accelerator(int on) {
  static const SimulatedCudaHooks simulated;
  static void* stub_table = nullptr;
  auto& hooks = const_cast<at::CUDAHooksInterface&>(at::detail::getCUDAHooks());
  void** object = reinterpret_cast<void**>(&hooks);
  if (stub_table == nullptr) {
    if (typeid(hooks) != typeid(at::CUDAHooksInterface)) return 0;
    stub_table = *object;
  }
  *object = on ? *reinterpret_cast<void* const*>(&simulated) : stub_table;
  return 1;
}

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
// the stub hooks object CPU torch made at start-up (torch keeps that one for good).
struct SimulatedCudaHooks final : public at::CUDAHooksInterface {
  bool isBuilt() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return false; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex) const override {}
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex) const override { return 0; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return 0; }
};
}  // namespace

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

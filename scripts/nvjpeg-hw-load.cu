// nvjpeg-hw-load: how nvJPEG's hardware JPEG engine keeps its rate while the SMs are busy.
//
// A measurement tool, not part of stoke: it isolates the question the H200 raised on
// 2026-11-26 (BENCHMARKS.md, "Third GPU session"): with fp16 matmuls running in the same
// process, stoke's engine route fell from 7050 to 888 images/s whatever its stream priority,
// while the CUDA decoders kept their rate. Here the engine decodes batches of the files named
// on stdin into device buffers, as RGBI (what stoke asks for) and as planar YUV (what the
// engine itself produces), with and without a load: kernels that spin on every SM from
// another stream of the same process. If the engine keeps its rate with YUV under the load
// but not with RGBI, nvJPEG's colour conversion (SM kernels) is what waits.
//
// Build (here, no GPU needed):
//   NVCC="$(scripts/setup-cuda.sh)"; cu="$(dirname "$NVCC")/.."
//   "$NVCC" -O2 -std=c++17 -o nvjpeg-hw-load scripts/nvjpeg-hw-load.cu -I"$cu/include" \
//       -L"$cu/lib" -l:libnvjpeg.so.13 -lpthread
// Run (on the GPU machine, libnvjpeg.so.13 on LD_LIBRARY_PATH):
//   find DATA -type f | head -2048 | ./nvjpeg-hw-load BATCH SECONDS [first|ablate|threads]
#include <cuda_runtime.h>
#include <nvjpeg.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)
#define NJ(x)                                                                                    \
  do {                                                                                           \
    nvjpegStatus_t s_ = (x);                                                                     \
    if (s_ != NVJPEG_STATUS_SUCCESS) {                                                           \
      std::fprintf(stderr, "%s:%d %s: nvjpeg status %d\n", __FILE__, __LINE__, #x, (int)s_);     \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Spins for about `cycles` clock cycles: one block per slot of every SM, the load.
__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

struct Image {
  std::vector<unsigned char> bytes;
  int w = 0, h = 0;
  unsigned char* dev = nullptr;  // 3 * w * h bytes: RGBI, or Y, U, V planes of pitch w
};

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int batch = argc > 1 ? std::atoi(argv[1]) : 64;
  double seconds = argc > 2 ? std::atof(argv[2]) : 4.0;
  std::vector<Image> images;
  for (std::string path; std::getline(std::cin, path);) {
    std::ifstream f(path, std::ios::binary);
    Image im;
    im.bytes.assign(std::istreambuf_iterator<char>(f), {});
    if (!im.bytes.empty()) images.push_back(std::move(im));
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  nvjpegHandle_t h;
  NJ(nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &h));
  unsigned engines = 0, cores = 0;
  NJ(nvjpegGetHardwareDecoderInfo(h, &engines, &cores));
  // Keep the images the engine takes (nvjpegDecodeBatchedSupported) with three components.
  std::vector<Image> kept;
  nvjpegJpegStream_t js;
  NJ(nvjpegJpegStreamCreate(h, &js));
  for (auto& im : images) {
    int nc;
    nvjpegChromaSubsampling_t css;
    int ws[NVJPEG_MAX_COMPONENT], hs[NVJPEG_MAX_COMPONENT];
    if (nvjpegGetImageInfo(h, im.bytes.data(), im.bytes.size(), &nc, &css, ws, hs) != NVJPEG_STATUS_SUCCESS) continue;
    if (nc != 3 || !(css == NVJPEG_CSS_420 || css == NVJPEG_CSS_422 || css == NVJPEG_CSS_444)) continue;
    int unsupported = 1;
    if (nvjpegJpegStreamParse(h, im.bytes.data(), im.bytes.size(), 0, 0, js) != NVJPEG_STATUS_SUCCESS) continue;
    if (nvjpegDecodeBatchedSupported(h, js, &unsupported) != NVJPEG_STATUS_SUCCESS || unsupported != 0) continue;
    im.w = ws[0];
    im.h = hs[0];
    CK(cudaMalloc(&im.dev, 3ull * im.w * im.h));
    kept.push_back(std::move(im));
  }
  std::printf("%s, %u engine(s) x %u core(s), %d SMs; %zu of %zu files taken, batch %d, %.1f s per run\n", prop.name,
              engines, cores, prop.multiProcessorCount, kept.size(), images.size(), batch, seconds);
  if ((int)kept.size() < batch) return 1;

  int least, greatest;
  CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  nvjpegJpegState_t st;
  NJ(nvjpegJpegStateCreate(h, &st));

  auto run = [&](const char* label, nvjpegOutputFormat_t fmt, bool load, int prio) {
    cudaStream_t s, ls;
    CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, prio));
    CK(cudaStreamCreateWithPriority(&ls, cudaStreamNonBlocking, least));
    std::atomic<bool> stop{false};
    std::thread loader;
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    long long cycles = (long long)khz;  // kHz: about 1 ms a block
    if (load) {
      loader = std::thread([&] {
        CK(cudaSetDevice(0));
        while (!stop.load()) {
          for (int k = 0; k < 10; k++) spin<<<prop.multiProcessorCount * 8, 256, 0, ls>>>(cycles);
          CK(cudaStreamSynchronize(ls));
        }
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    NJ(nvjpegDecodeBatchedInitialize(h, st, batch, 1, fmt));
    std::vector<const unsigned char*> data(batch);
    std::vector<size_t> lens(batch);
    std::vector<nvjpegImage_t> out(batch);
    size_t next = 0, decoded = 0, calls = 0, failed_calls = 0;
    double in_call = 0, in_sync = 0;
    auto t0 = Clock::now();
    bool warm = false;
    while (true) {
      double el = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!warm && calls == 2) {  // two calls of warm-up, not counted
        warm = true;
        t0 = Clock::now();
        decoded = 0;
        in_call = in_sync = 0;
        el = 0;
      }
      if (warm && el > seconds) break;
      for (int i = 0; i < batch; i++) {
        Image& im = kept[next++ % kept.size()];
        data[i] = im.bytes.data();
        lens[i] = im.bytes.size();
        out[i] = nvjpegImage_t{};
        if (fmt == NVJPEG_OUTPUT_RGBI) {
          out[i].channel[0] = im.dev;
          out[i].pitch[0] = 3 * im.w;
        } else {
          for (int c = 0; c < 3; c++) {
            out[i].channel[c] = im.dev + (size_t)c * im.w * im.h;
            out[i].pitch[c] = im.w;
          }
        }
      }
      auto a = Clock::now();
      nvjpegStatus_t r = nvjpegDecodeBatched(h, st, data.data(), lens.data(), out.data(), s);
      if (r != NVJPEG_STATUS_SUCCESS) failed_calls++;
      auto b = Clock::now();
      CK(cudaStreamSynchronize(s));
      auto c = Clock::now();
      in_call += std::chrono::duration<double>(b - a).count();
      in_sync += std::chrono::duration<double>(c - b).count();
      decoded += batch;
      calls++;
    }
    double el = std::chrono::duration<double>(Clock::now() - t0).count();
    size_t timed = calls - 2;
    stop = true;
    if (loader.joinable()) loader.join();
    std::printf("%-44s %7.0f images/s; per call of %d: %.2f ms inside nvjpegDecodeBatched, %.2f ms in the stream sync; %zu failed calls\n",
                label, decoded / el, batch, 1e3 * in_call / timed, 1e3 * in_sync / timed, failed_calls);
    std::fflush(stdout);
    CK(cudaStreamDestroy(s));
    CK(cudaStreamDestroy(ls));
  };
  if (argc > 3 && std::string(argv[3]) == "threads") {
    // Several host threads calling the engine at once, each with its own state and stream
    // (the handle is shared, as nvJPEG allows), without and with the spinning-SM load: the
    // batched call holds its thread until its images are converted, so under a load a call is
    // bound by the conversion kernels' waits, which concurrent calls might overlap.
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    for (bool load : {false, true}) {
      for (int threads : {1, 2, 4}) {
        std::atomic<bool> stop{false};
        cudaStream_t ls;
        CK(cudaStreamCreateWithPriority(&ls, cudaStreamNonBlocking, least));
        std::thread loader;
        if (load) {
          loader = std::thread([&] {
            CK(cudaSetDevice(0));
            while (!stop.load()) {
              for (int k = 0; k < 10; k++) spin<<<prop.multiProcessorCount * 8, 256, 0, ls>>>((long long)khz);
              CK(cudaStreamSynchronize(ls));
            }
          });
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
        std::atomic<size_t> decoded{0}, failed{0};
        std::atomic<bool> go{false}, done{false};
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; t++) {
          ts.emplace_back([&, t] {
            CK(cudaSetDevice(0));
            nvjpegJpegState_t ts_state;
            NJ(nvjpegJpegStateCreate(h, &ts_state));
            cudaStream_t s;
            CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            NJ(nvjpegDecodeBatchedInitialize(h, ts_state, batch, 1, NVJPEG_OUTPUT_RGBI));
            std::vector<const unsigned char*> data(batch);
            std::vector<size_t> lens(batch);
            std::vector<nvjpegImage_t> out(batch);
            // Each thread decodes its own images (disjoint destinations: indices t mod threads).
            size_t usable = kept.size() / threads * threads;
            size_t next = t;
            while (!go.load()) std::this_thread::yield();
            while (!done.load()) {
              for (int i = 0; i < batch; i++) {
                Image& im = kept[next % usable];
                next += threads;
                data[i] = im.bytes.data();
                lens[i] = im.bytes.size();
                out[i] = nvjpegImage_t{};
                out[i].channel[0] = im.dev;
                out[i].pitch[0] = 3 * im.w;
              }
              if (nvjpegDecodeBatched(h, ts_state, data.data(), lens.data(), out.data(), s) != NVJPEG_STATUS_SUCCESS) failed++;
              CK(cudaStreamSynchronize(s));
              decoded += batch;
            }
            CK(cudaStreamDestroy(s));
            nvjpegJpegStateDestroy(ts_state);
          });
        }
        go = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // warm-up, not counted
        size_t d0 = decoded.load();
        auto t0 = Clock::now();
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
        size_t d1 = decoded.load();
        double el = std::chrono::duration<double>(Clock::now() - t0).count();
        done = true;
        for (auto& th : ts) th.join();
        stop = true;
        if (loader.joinable()) loader.join();
        CK(cudaStreamDestroy(ls));
        std::printf("%d thread(s) calling, %-24s %7.0f images/s; %zu failed calls\n", threads,
                    load ? "spinning SMs:" : "no load:", (d1 - d0) / el, failed.load());
        std::fflush(stdout);
      }
    }
    return 0;
  }
  if (argc > 3 && std::string(argv[3]) == "ablate") {
    // What of stoke's engine calls costs what, one change at a time from nvjpegDecodeBatched
    // (default flags, whole images, initialised once): the interpolated-upsampling flag,
    // nvjpegDecodeBatchedEx with params, a region (the centred 70 % x 70 %), and
    // nvjpegDecodeBatchedInitialize before every call, as stoke's route made them.
    nvjpegHandle_t hi;
    NJ(nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, &hi));
    nvjpegJpegState_t sti;
    NJ(nvjpegJpegStateCreate(hi, &sti));
    std::vector<nvjpegDecodeParams_t> ps(batch), psi(batch);
    for (int i = 0; i < batch; i++) {
      NJ(nvjpegDecodeParamsCreate(h, &ps[i]));
      NJ(nvjpegDecodeParamsCreate(hi, &psi[i]));
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
    auto ab = [&](const char* label, bool interp, bool ex, bool roi, bool init_each) {
      nvjpegHandle_t hh = interp ? hi : h;
      nvjpegJpegState_t ss = interp ? sti : st;
      auto& pp = interp ? psi : ps;
      NJ(nvjpegDecodeBatchedInitialize(hh, ss, batch, 1, NVJPEG_OUTPUT_RGBI));
      std::vector<const unsigned char*> data(batch);
      std::vector<size_t> lens(batch);
      std::vector<nvjpegImage_t> out(batch);
      size_t next = 0, decoded = 0, calls = 0, failed = 0;
      double in_call = 0;
      auto t0 = Clock::now();
      while (true) {
        if (calls == 2 && decoded) {
          t0 = Clock::now();
          decoded = 0;
          in_call = 0;
        }
        if (calls > 2 && std::chrono::duration<double>(Clock::now() - t0).count() > seconds) break;
        for (int i = 0; i < batch; i++) {
          Image& im = kept[next++ % kept.size()];
          data[i] = im.bytes.data();
          lens[i] = im.bytes.size();
          int rw = roi ? im.w * 7 / 10 : im.w, rh = roi ? im.h * 7 / 10 : im.h;
          out[i] = nvjpegImage_t{};
          out[i].channel[0] = im.dev;
          out[i].pitch[0] = 3 * rw;
          if (ex) {
            NJ(nvjpegDecodeParamsSetOutputFormat(pp[i], NVJPEG_OUTPUT_RGBI));
            if (roi)
              NJ(nvjpegDecodeParamsSetROI(pp[i], (im.w - rw) / 2, (im.h - rh) / 2, rw, rh));
            else
              NJ(nvjpegDecodeParamsSetROI(pp[i], 0, 0, -1, -1));
          }
        }
        auto a = Clock::now();
        nvjpegStatus_t r = NVJPEG_STATUS_SUCCESS;
        if (init_each) r = nvjpegDecodeBatchedInitialize(hh, ss, batch, 1, NVJPEG_OUTPUT_RGBI);
        if (r == NVJPEG_STATUS_SUCCESS)
          r = ex ? nvjpegDecodeBatchedEx(hh, ss, data.data(), lens.data(), out.data(), pp.data(), s)
                 : nvjpegDecodeBatched(hh, ss, data.data(), lens.data(), out.data(), s);
        CK(cudaStreamSynchronize(s));
        in_call += std::chrono::duration<double>(Clock::now() - a).count();
        if (r != NVJPEG_STATUS_SUCCESS) failed++;
        decoded += batch;
        calls++;
      }
      double el = std::chrono::duration<double>(Clock::now() - t0).count();
      std::printf("%-62s %7.0f images/s; %.2f ms a call of %d; %zu failed calls\n", label, decoded / el,
                  1e3 * in_call / (calls - 2), batch, failed);
      std::fflush(stdout);
    };
    ab("A batched, default flags, whole images, initialised once", false, false, false, false);
    ab("B A + interpolated-upsampling flag", true, false, false, false);
    ab("C A as BatchedEx with params (whole image)", false, true, false, false);
    ab("D C + region 70 % x 70 %", false, true, true, false);
    ab("E A + BatchedInitialize before every call", false, false, false, true);
    ab("F stoke's: B + C + D + E", true, true, true, true);
    ab("G B + C + D, initialised once", true, true, true, false);
    ab("A again", false, false, false, false);
    return 0;
  }
  run("RGBI, no load", NVJPEG_OUTPUT_RGBI, false, greatest);
  if (argc > 3) return 0;  // the first run only (under a profiler)
  run("YUV, no load", NVJPEG_OUTPUT_YUV, false, greatest);
  run("RGBI, spinning SMs, decode stream high", NVJPEG_OUTPUT_RGBI, true, greatest);
  run("YUV, spinning SMs, decode stream high", NVJPEG_OUTPUT_YUV, true, greatest);
  run("RGBI, spinning SMs, decode stream normal", NVJPEG_OUTPUT_RGBI, true, least);
  run("YUV, spinning SMs, decode stream normal", NVJPEG_OUTPUT_YUV, true, least);
  return 0;
}

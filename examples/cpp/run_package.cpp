// Run an AOTInductor package (a tracebridge artifact's compiled form) from C++.
//
//   run_package MODEL.pt2 D0 [D1 ...]
//
// The input is one float32 tensor of shape D0 x D1 x ..., filled with
// torch::linspace(-1, 1, numel) so that a Python test can build the same tensor and
// compare. Each output is printed as "output K shape S0 S1 ..." and then its values,
// one line, with 9 significant digits. Extract the package from an artifact with
// tracebridge.backends.aot.extract_package("MODEL.tb", "MODEL.pt2") (see README.md).
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: run_package MODEL.pt2 D0 [D1 ...]\n";
    return 2;
  }
  std::vector<int64_t> shape;
  for (int i = 2; i < argc; ++i) {
    shape.push_back(std::stoll(argv[i]));
  }
  int64_t numel = 1;
  for (int64_t d : shape) {
    numel *= d;
  }
  c10::InferenceMode no_autograd;
  torch::inductor::AOTIModelPackageLoader loader(argv[1]);
  at::Tensor input = torch::linspace(-1.0, 1.0, numel, torch::kFloat32).reshape(shape);
  std::vector<at::Tensor> outputs = loader.run({input});
  for (size_t k = 0; k < outputs.size(); ++k) {
    at::Tensor out = outputs[k].contiguous().to(torch::kFloat64).cpu();
    std::cout << "output " << k << " shape";
    for (int64_t d : out.sizes()) {
      std::cout << " " << d;
    }
    std::cout << "\n";
    const double* data = out.data_ptr<double>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      std::printf(i ? " %.9g" : "%.9g", data[i]);
    }
    std::printf("\n");
  }
  return 0;
}

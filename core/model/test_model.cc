#include "core/model/test_model.h"

#include <filesystem>
#include <memory>

#include "core/model/model_store.h"
#include "gtest/gtest.h"

namespace glimpse::model::testing {

const Model* SharedDefaultModel() {
  static const Model* model = []() -> const Model* {
    const std::string path = DefaultModelPath();
    if (!std::filesystem::exists(path)) {
      ADD_FAILURE() << path << " is missing: run `make model` (make test does it first)";
      return nullptr;
    }
    auto loaded = Model::Load(path);
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status();
      return nullptr;
    }
    return loaded->release();  // lives until exit, shared by every test
  }();
  return model;
}

kernels::ThreadPool& SharedPool() {
  static kernels::ThreadPool* pool = new kernels::ThreadPool();
  return *pool;
}

}  // namespace glimpse::model::testing

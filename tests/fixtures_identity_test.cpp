// The fixture copies under tests/data/fixtures must stay byte-identical to the golden data in
// K3_SHARED_FIXTURES_DIR (tests/CMakeLists.txt), the shared folder beside the repository.
// Skipped (not failed) when that folder is absent, e.g. on a bare clone.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/test_support.h"

namespace fs = std::filesystem;

TEST(FixturesIdentity, CopiesMatchSharedFixtures) {
  const fs::path ours = fs::path(k3::testing::fixture_dir(""));
  ASSERT_TRUE(fs::is_directory(ours)) << ours;
  int compared = 0;
  for (const auto& entry : fs::directory_iterator(ours)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename();
    const std::string shared = k3::testing::shared_fixture_dir(name);
    if (shared.empty()) continue;
    for (const auto& f : fs::recursive_directory_iterator(entry.path())) {
      if (!f.is_regular_file()) continue;
      const fs::path rel = fs::relative(f.path(), entry.path());
      const fs::path theirs = fs::path(shared) / rel;
      ASSERT_TRUE(fs::exists(theirs)) << rel << " is not in " << shared;
      EXPECT_EQ(k3::testing::read_file(f.path()), k3::testing::read_file(theirs)) << name << "/" << rel << " differs";
      ++compared;
    }
  }
  if (compared == 0) GTEST_SKIP() << "../shared/fixtures not present; nothing to compare";
}

// And nothing the golden data holds is missing here (a fresh clone must carry every fixture):
// every folder and file under K3_SHARED_FIXTURES_DIR has its copy.
TEST(FixturesIdentity, EverySharedFixtureIsCopied) {
  const fs::path ours = fs::path(k3::testing::fixture_dir(""));
  const std::string shared_root = k3::testing::shared_fixture_dir("");
  if (shared_root.empty()) GTEST_SKIP() << "../shared/fixtures not present; nothing to compare";
  int checked = 0;
  for (const auto& f : fs::recursive_directory_iterator(shared_root)) {
    if (!f.is_regular_file()) continue;
    const fs::path rel = fs::relative(f.path(), shared_root);
    EXPECT_TRUE(fs::exists(ours / rel)) << rel << " has no copy under " << ours;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

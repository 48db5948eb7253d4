#include "lite_support.h"

namespace tdaot::lite_test {

const nlohmann::json& expected() { return fixtures::json_file("lite_expected.json"); }

}  // namespace tdaot::lite_test

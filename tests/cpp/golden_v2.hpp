// The reader of the v2 golden set (tests/golden/v2, format in tests/golden/README.md): cases.json parsed
// by a small JSON reader (objects, arrays, strings, numbers, booleans, null: what the generator writes),
// and the raw little-endian arrays each case names.
// TODO(merge with #13): the stateless v2 cases need the same reader; keep one.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace mha_test {

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool boolean = false;
  double number = 0.0;
  std::string text;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;  // (std::map of an incomplete type is not portable)

  const Json* find(const std::string& key) const {
    for (const auto& field : fields)
      if (field.first == key) return &field.second;
    return nullptr;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  const Json& operator[](const std::string& key) const {
    INFO("JSON field " << key);
    REQUIRE(has(key));
    return *find(key);
  }
  int32_t as_int() const {
    REQUIRE(kind == Kind::kNumber);
    return static_cast<int32_t>(number);
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}
  Json parse() {
    Json value = parse_value();
    skip_space();
    REQUIRE(at_ == s_.size());
    return value;
  }

 private:
  void skip_space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\r' || s_[at_] == '\t')) ++at_;
  }
  bool take(char c) {
    skip_space();
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  std::string parse_string() {
    REQUIRE(take('"'));
    std::string out;
    while (at_ < s_.size() && s_[at_] != '"') {
      if (s_[at_] == '\\') ++at_;  // the golden files escape nothing beyond \" and \\ .
      out += s_[at_++];
    }
    REQUIRE(take('"'));
    return out;
  }
  Json parse_value() {
    skip_space();
    REQUIRE(at_ < s_.size());
    Json v;
    const char c = s_[at_];
    if (c == '{') {
      v.kind = Json::Kind::kObject;
      ++at_;
      if (take('}')) return v;
      do {
        skip_space();
        const std::string key = parse_string();
        REQUIRE(take(':'));
        v.fields.emplace_back(key, parse_value());
      } while (take(','));
      REQUIRE(take('}'));
    } else if (c == '[') {
      v.kind = Json::Kind::kArray;
      ++at_;
      if (take(']')) return v;
      do v.items.push_back(parse_value());
      while (take(','));
      REQUIRE(take(']'));
    } else if (c == '"') {
      v.kind = Json::Kind::kString;
      v.text = parse_string();
    } else if (s_.compare(at_, 4, "true") == 0 || s_.compare(at_, 5, "false") == 0) {
      v.kind = Json::Kind::kBool;
      v.boolean = s_[at_] == 't';
      at_ += v.boolean ? 4 : 5;
    } else if (s_.compare(at_, 4, "null") == 0) {
      at_ += 4;
    } else {
      v.kind = Json::Kind::kNumber;
      size_t used = 0;
      v.number = std::stod(s_.substr(at_, 40), &used);
      REQUIRE(used > 0);
      at_ += used;
    }
    return v;
  }

  const std::string& s_;
  size_t at_ = 0;
};

// tests/golden/v2 under the golden root the build points at.
inline std::string golden_v2_dir() { return std::string(MHA_GOLDEN_ROOT) + "/v2"; }

inline Json read_golden_v2_cases() {
  std::ifstream file(golden_v2_dir() + "/cases.json");
  REQUIRE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  const std::string json = text.str();
  return JsonParser(json).parse();
}

template <typename T>
std::vector<T> read_golden_v2_array(const std::string& file, int64_t expected_count) {
  std::ifstream in(golden_v2_dir() + "/" + file, std::ios::binary);
  INFO("golden file " << file);
  REQUIRE(in.good());
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(static_cast<int64_t>(bytes.size()) == expected_count * static_cast<int64_t>(sizeof(T)));
  std::vector<T> values(static_cast<size_t>(expected_count));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

}  // namespace mha_test

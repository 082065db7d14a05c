// The one reader of the PyTorch golden vectors (tests/golden/README.md): each set's cases.json, parsed
// by a small JSON reader, and the raw little-endian arrays its `files` name. No case names are listed
// here: a case added to cases.json is tested.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mha/core/shape.hpp"

namespace mha_test {

// A JSON value: enough of JSON for cases.json (objects keep their key order; numbers are doubles).
struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;

  // The member `key` of an object, or nullptr.
  const Json* find(const std::string& key) const {
    for (const auto& member : object)
      if (member.first == key) return &member.second;
    return nullptr;
  }
  const Json& at(const std::string& key) const {
    const Json* member = find(key);
    INFO("JSON key " << key);
    REQUIRE(member != nullptr);
    return *member;
  }
  int32_t as_int() const {
    REQUIRE(type == Type::kNumber);
    return static_cast<int32_t>(number);
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : text_(text) {}

  Json parse() {
    Json value = parse_value();
    skip_space();
    REQUIRE(at_ == text_.size());
    return value;
  }

 private:
  void skip_space() {
    while (at_ < text_.size() && std::strchr(" \t\r\n", text_[at_]) != nullptr) ++at_;
  }
  char peek() {
    skip_space();
    REQUIRE(at_ < text_.size());
    return text_[at_];
  }
  void expect(char c) {
    INFO("JSON at byte " << at_ << ": expected '" << c << "'");
    REQUIRE(peek() == c);
    ++at_;
  }
  bool consume_word(const char* word) {
    const size_t n = std::strlen(word);
    if (text_.compare(at_, n, word) != 0) return false;
    at_ += n;
    return true;
  }
  std::string parse_string() {
    expect('"');
    std::string s;
    while (at_ < text_.size() && text_[at_] != '"') {
      char c = text_[at_++];
      if (c == '\\') {
        REQUIRE(at_ < text_.size());
        const char e = text_[at_++];
        switch (e) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'r': c = '\r'; break;
          case 'b': c = '\b'; break;
          case 'f': c = '\f'; break;
          case 'u': {  // cases.json is ASCII; keep the code point's low byte
            REQUIRE(at_ + 4 <= text_.size());
            c = static_cast<char>(std::stoi(text_.substr(at_, 4), nullptr, 16) & 0x7f);
            at_ += 4;
            break;
          }
          default: c = e;  // \" \\ \/
        }
      }
      s += c;
    }
    expect('"');
    return s;
  }
  Json parse_value() {
    Json v;
    const char c = peek();
    if (c == '{') {
      v.type = Json::Type::kObject;
      ++at_;
      if (peek() == '}') return ++at_, v;
      for (;;) {
        std::string key = parse_string();
        expect(':');
        v.object.emplace_back(std::move(key), parse_value());
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.type = Json::Type::kArray;
      ++at_;
      if (peek() == ']') return ++at_, v;
      for (;;) {
        v.array.push_back(parse_value());
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.type = Json::Type::kString;
      v.string = parse_string();
      return v;
    }
    if (consume_word("true")) {
      v.type = Json::Type::kBool;
      v.boolean = true;
      return v;
    }
    if (consume_word("false")) {
      v.type = Json::Type::kBool;
      return v;
    }
    if (consume_word("null")) return v;
    size_t used = 0;
    v.type = Json::Type::kNumber;
    v.number = std::stod(text_.substr(at_, 40), &used);
    REQUIRE(used > 0);
    at_ += used;
    return v;
  }

  const std::string& text_;
  size_t at_ = 0;
};

// One case of a golden set.
struct GoldenCase {
  std::string folder;  // the set's folder
  std::string name;
  std::string kind;  // "stateless" (every v1 case) or "cache"
  mha::AttentionShape shape;
  int32_t num_kv_heads = 0;  // Hkv (v1: H)
  Json entry;                // the whole cases.json entry (v2: `options`, `cache`)

  bool has(const std::string& role) const { return entry.at("files").find(role) != nullptr; }

  // The file of `role` as `count` values of T (its size must match exactly).
  template <typename T>
  std::vector<T> read(const std::string& role, int64_t count) const {
    const std::string path = folder + "/" + entry.at("files").at(role).string;
    INFO("golden file " << path);
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in.good());
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(static_cast<int64_t>(bytes.size()) == count * static_cast<int64_t>(sizeof(T)));
    std::vector<T> values(static_cast<size_t>(count));
    if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
  }
};

// Every case of tests/golden/<set>/cases.json.
inline std::vector<GoldenCase> load_golden_set(const std::string& set) {
  const std::string folder = std::string(MHA_GOLDEN_ROOT) + "/" + set;
  std::ifstream file(folder + "/cases.json");
  INFO("reading " << folder << "/cases.json");
  REQUIRE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  const std::string json = text.str();
  const Json cases = JsonParser(json).parse();
  REQUIRE(cases.type == Json::Type::kArray);
  std::vector<GoldenCase> out;
  for (const Json& entry : cases.array) {
    GoldenCase c;
    c.folder = folder;
    c.entry = entry;
    c.name = entry.at("name").string;
    c.kind = entry.find("kind") != nullptr ? entry.at("kind").string : "stateless";
    c.shape =
        mha::AttentionShape{entry.at("batch").as_int(), entry.at("seqLen").as_int(), entry.at("kvSeqLen").as_int(),
                            entry.at("dModel").as_int(), entry.at("numHeads").as_int()};
    c.num_kv_heads = c.shape.num_heads;
    const Json* options = entry.find("options");
    if (options != nullptr && options->find("numKvHeads") != nullptr)
      c.num_kv_heads = options->at("numKvHeads").as_int();
    out.push_back(std::move(c));
  }
  return out;
}

// The accuracy rule of docs/spec.md: max(1e-5 * max(1, max|out64|), 2 * max|out32 - out64|).
inline double golden_tolerance(const std::vector<float>& out64, const std::vector<float>& out32) {
  double max64 = 1.0, torch_error = 0.0;
  for (size_t i = 0; i < out64.size(); ++i) {
    if (!std::isfinite(out64[i])) continue;
    max64 = std::max(max64, double(std::fabs(out64[i])));
    torch_error = std::max(torch_error, std::fabs(double(out32[i]) - double(out64[i])));
  }
  return std::max(1e-5 * max64, 2.0 * torch_error);
}

}  // namespace mha_test

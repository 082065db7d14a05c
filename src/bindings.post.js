// Linked into every glue (--post-js, CMakeLists.txt), inside the module factory: the JS side of the C exports
// of src/bindings.cpp that hand back strings or the call structs' layouts, under the names web/src calls
// (web/src/mha.d.ts). Marshalling only. The module is usable once its ready promise resolves; these
// functions are called after that.

Module['releaseScratch'] = function () { _mha_release_scratch(); };
Module['heapBytesInUse'] = function () { return _mha_heap_bytes_in_use(); };
Module['version'] = function () { return UTF8ToString(_mha_version()); };
Module['simd'] = function () { return _mha_simd() !== 0; };
Module['statusMessage'] = function (status) { return UTF8ToString(_mha_status_message(status)); };

// {field name: byte offset} of call struct `layout` (0: AttentionCallAbi, 1: CacheAttendCallAbi), and its
// `size` in bytes.
function mhaCallLayout(layout) {
  var fields = {};
  var i = 0;
  for (var name; (name = _mha_call_field_name(layout, i)) !== 0; ++i) {
    fields[UTF8ToString(name)] = _mha_call_field_offset(layout, i);
  }
  fields['size'] = _mha_call_field_offset(layout, i);
  return fields;
}
Module['attentionCallLayout'] = function () { return mhaCallLayout(0); };
Module['kvCacheAttendCallLayout'] = function () { return mhaCallLayout(1); };

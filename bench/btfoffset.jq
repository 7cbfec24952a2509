# btfoffset.jq: the byte offset of a member inside a kernel struct, from
# `bpftool -j btf dump file /sys/kernel/btf/vmlinux`, looking through
# anonymous unions and structs (bpftrace 0.17 has no offsetof).
#
#	jq -r --arg struct perf_event --arg path hw.hrtimer -f btfoffset.jq
(.types | map({key: (.id | tostring), value: .}) | from_entries) as $types
# resolve: the type behind typedefs and qualifiers.
| def resolve($id):
	$types[$id | tostring] as $t
	| if $t.kind == "TYPEDEF" or $t.kind == "CONST" or $t.kind == "VOLATILE" or $t.kind == "RESTRICT"
	then resolve($t.type_id) else $id end;
# member: the first member called $name in type $id, anonymous members
# searched through, as {bits: offset from the start of $id, type_id}.
def member($id; $name):
	first($types[resolve($id) | tostring].members[]? |
		if .name == $name then {bits: .bits_offset, type_id}
		elif .name == "(anon)" then member(.type_id; $name) as $m | $m + {bits: ($m.bits + .bits_offset)}
		else empty end);
first(.types[] | select(.kind == "STRUCT" and .name == $struct)) as $s
| reduce ($path | split("."))[] as $name ({bits: 0, type_id: $s.id};
	member(.type_id; $name) as $m | {bits: (.bits + $m.bits), type_id: $m.type_id})
| if . == null then error("no \($path) in struct \($struct)") else .bits / 8 end

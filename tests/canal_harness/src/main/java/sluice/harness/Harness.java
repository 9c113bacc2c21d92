package sluice.harness;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.otter.canal.protocol.FlatMessage;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.formats.json.canal.CanalJsonDeserializationSchema;
import org.apache.flink.formats.common.TimestampFormat;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.table.api.DataTypes;
import org.apache.flink.table.data.DecimalData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.utils.LogicalTypeParser;
import org.apache.flink.table.types.utils.TypeConversions;
import org.apache.flink.util.Collector;
import org.apache.flink.util.SimpleUserCodeClassLoader;
import org.apache.flink.util.UserCodeClassLoader;

/**
 * Reads canal-json values (one per stdin line, as Kafka held them) with clients no one here wrote,
 * and prints what each saw as one JSON line per message (canal) or per row (Flink).
 *
 * <pre>
 *   Harness canal                 canal.protocol's FlatMessage, parsed with fastjson2 as canal's Kafka client does
 *   Harness flink '[["id","INT"],...]'   Flink's CanalJsonDeserializationSchema for that physical row type
 *   Harness types                 canal's own FlatMessages of rows in a binlog file (CanalTypes)
 * </pre>
 */
public final class Harness {
    private Harness() {}

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        if (args[0].equals("canal")) {
            canal(in);
        } else if (args[0].equals("types")) {
            CanalTypes.run(in);
        } else {
            flink(in, JSON.parseArray(args[1]));
        }
        System.out.flush();
    }

    private static void canal(BufferedReader in) throws Exception {
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            FlatMessage message = JSON.parseObject(line, FlatMessage.class);
            Map<String, Object> seen = new LinkedHashMap<>();
            seen.put("id", message.getId());
            seen.put("database", message.getDatabase());
            seen.put("table", message.getTable());
            seen.put("type", message.getType());
            seen.put("isDdl", message.getIsDdl());
            seen.put("pkNames", message.getPkNames());
            seen.put("es", message.getEs());
            seen.put("ts", message.getTs());
            seen.put("gtid", message.getGtid());
            seen.put("sqlType", message.getSqlType());
            seen.put("mysqlType", message.getMysqlType());
            seen.put("data", message.getData());
            seen.put("old", message.getOld());
            System.out.println(JSON.toJSONString(seen, com.alibaba.fastjson2.JSONWriter.Feature.WriteNulls));
        }
    }

    private static void flink(BufferedReader in, JSONArray columns) throws Exception {
        List<DataTypes.Field> fields = new ArrayList<>();
        List<LogicalType> types = new ArrayList<>();
        for (int i = 0; i < columns.size(); i++) {
            JSONArray column = columns.getJSONArray(i);
            LogicalType type = LogicalTypeParser.parse(column.getString(1), Harness.class.getClassLoader());
            types.add(type);
            fields.add(DataTypes.FIELD(column.getString(0), TypeConversions.fromLogicalToDataType(type)));
        }
        DataType physical = DataTypes.ROW(fields.toArray(new DataTypes.Field[0]));
        RowType rowType = (RowType) physical.getLogicalType();
        CanalJsonDeserializationSchema schema = CanalJsonDeserializationSchema
            .builder(physical, Collections.emptyList(), InternalTypeInfo.of(rowType))
            .setIgnoreParseErrors(false)
            .setTimestampFormat(TimestampFormat.SQL)
            .build();
        schema.open(new Context());
        List<RowData.FieldGetter> getters = new ArrayList<>();
        for (int i = 0; i < types.size(); i++) {
            getters.add(RowData.createFieldGetter(types.get(i), i));
        }
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            List<RowData> rows = new ArrayList<>();
            schema.deserialize(line.getBytes(StandardCharsets.UTF_8), new Collector<RowData>() {
                @Override public void collect(RowData row) { rows.add(row); }
                @Override public void close() {}
            });
            for (RowData row : rows) {
                List<String> values = new ArrayList<>();
                for (RowData.FieldGetter getter : getters) {
                    values.add(text(getter.getFieldOrNull(row)));
                }
                Map<String, Object> seen = new LinkedHashMap<>();
                seen.put("kind", row.getRowKind().shortString());
                seen.put("values", values);
                System.out.println(JSON.toJSONString(seen, com.alibaba.fastjson2.JSONWriter.Feature.WriteNulls));
            }
        }
    }

    private static String text(Object value) {
        if (value == null) {
            return null;
        }
        if (value instanceof DecimalData) {
            return ((DecimalData) value).toBigDecimal().toPlainString();
        }
        if (value instanceof TimestampData) {
            return ((TimestampData) value).toLocalDateTime().toString();
        }
        if (value instanceof byte[]) {
            return HexFormat.of().formatHex((byte[]) value);
        }
        if (value instanceof StringData) {
            return value.toString();
        }
        return String.valueOf(value);
    }

    private static final class Context implements DeserializationSchema.InitializationContext {
        @Override public MetricGroup getMetricGroup() { return new UnregisteredMetricsGroup(); }
        @Override public UserCodeClassLoader getUserCodeClassLoader() {
            return SimpleUserCodeClassLoader.create(Harness.class.getClassLoader());
        }
    }
}

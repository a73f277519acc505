package io.orbitmq.interop;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.HexFormat;
import java.util.Map;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.java.message.MessageViewImpl;

/** What every subcommand shares: the client's configuration, subscriptions, and a received
 * message as JSON. */
final class Clients {
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    private Clients() {
    }

    /**
     * --endpoint (the proxy's host:port), --namespace, --request-timeout-ms, --ssl, and the
     * session credentials --access-key with its secret in the environment variable that
     * --secret-key-env names (a secret on the command line shows in the process list). The
     * client speaks TLS unless told otherwise; orbitmq's proxy serves plaintext gRPC, like
     * RocketMQ's proxy behind a TLS-terminating load balancer.
     */
    static ClientConfiguration configuration(Options options) {
        var builder = ClientConfiguration.newBuilder()
                .setEndpoints(options.required("endpoint"))
                .setNamespace(options.string("namespace", ""))
                .setRequestTimeout(Duration.ofMillis(options.number("request-timeout-ms", 3_000)))
                .enableSsl(options.flag("ssl"));
        String accessKey = options.string("access-key", null);
        if (accessKey != null) {
            String secretEnv = options.required("secret-key-env");
            String secretKey = System.getenv(secretEnv);
            if (secretKey == null) {
                throw new Options.UsageException("--secret-key-env names " + secretEnv + ", which is not set");
            }
            builder.setCredentialProvider(new StaticSessionCredentialsProvider(accessKey, secretKey));
        }
        return builder.build();
    }

    /** --topic with --filter-tag EXPR or --filter-sql EXPR (neither: every message). */
    static Map<String, FilterExpression> subscription(Options options) {
        String topic = options.required("topic");
        String tag = options.string("filter-tag", null);
        String sql = options.string("filter-sql", null);
        if (tag != null && sql != null) {
            throw new Options.UsageException("--filter-tag and --filter-sql exclude each other");
        }
        FilterExpression filter = sql != null
                ? new FilterExpression(sql, FilterExpressionType.SQL92)
                : new FilterExpression(tag != null ? tag : "*", FilterExpressionType.TAG);
        return Map.of(topic, filter);
    }

    /**
     * A received message as the application sees it: ids, tag, keys, group, user properties,
     * the body's sha256 and size (its base64 too with {@code withBody}), born host and time,
     * delivery attempt, and whether the client judged the body corrupted (its digest check).
     */
    static JsonObject view(String name, MessageView message, boolean withBody) {
        JsonObject event = Output.event(name);
        event.addProperty("message_id", message.getMessageId().toString());
        event.addProperty("topic", message.getTopic());
        event.addProperty("tag", message.getTag().orElse(null));
        JsonArray keys = new JsonArray();
        message.getKeys().forEach(keys::add);
        event.add("keys", keys);
        event.addProperty("message_group", message.getMessageGroup().orElse(null));
        JsonObject properties = new JsonObject();
        message.getProperties().forEach(properties::addProperty);
        event.add("properties", properties);
        byte[] body = bytes(message.getBody());
        event.addProperty("body_sha256", sha256(body));
        event.addProperty("body_size", body.length);
        if (withBody) {
            event.addProperty("body_b64", java.util.Base64.getEncoder().encodeToString(body));
        }
        event.addProperty("born_host", message.getBornHost());
        event.addProperty("born_timestamp", message.getBornTimestamp());
        event.addProperty("delivery_timestamp", message.getDeliveryTimestamp().orElse(null));
        event.addProperty("delivery_attempt", message.getDeliveryAttempt());
        if (message instanceof MessageViewImpl impl) {
            event.addProperty("corrupted", impl.isCorrupted());
            // when the proxy sent it (epoch ms): what the client's latency figures start from
            event.addProperty("transport_delivery_timestamp", impl.getTransportDeliveryTimestamp().orElse(null));
        }
        event.addProperty("received_epoch_ms", System.currentTimeMillis());
        return event;
    }

    static byte[] bytes(ByteBuffer buffer) {
        ByteBuffer copy = buffer.duplicate();
        byte[] bytes = new byte[copy.remaining()];
        copy.get(bytes);
        return bytes;
    }

    static String sha256(byte[] bytes) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JVM has SHA-256", e);
        }
    }
}
